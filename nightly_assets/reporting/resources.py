"""Notifiers: where alerts go. A local file in the embedded default, Slack in production."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import dagster as dg
from dagster_slack import SlackResource
from pydantic import Field


@dataclass(frozen=True)
class Alert:
    """One thing a release engineer should hear about: a failed run, a failed check, a missing night."""

    pipeline: str
    partition: str
    severity: str  # "error" or "warn"
    title: str
    run_id: str  # "" for a night no run summarized
    channel: str
    lines: list[str] = field(default_factory=list)

    def text(self) -> str:
        icon = ":rotating_light:" if self.severity == "error" else ":warning:"
        body = "\n".join(f"• {line}" for line in self.lines)
        run = f", run {self.run_id[:8]}" if self.run_id else ""
        return f"{icon} *{self.title}* ({self.pipeline} {self.partition}{run})\n{body}"


class NotifierResource(dg.ConfigurableResource):
    """Base of the notifiers; `notify` delivers one alert."""

    def notify(self, alert: Alert) -> None:
        raise NotImplementedError

    def destination(self, alert: Alert) -> str:
        """Where `alert` goes, for people (the UI records it): never a token or a webhook URL."""
        return type(self).__name__


class FileNotifierResource(NotifierResource):
    """Appends each alert as one JSON line to `path` (the embedded default's inbox)."""

    path: str

    def notify(self, alert: Alert) -> None:
        target = Path(self.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as inbox:
            inbox.write(json.dumps({**asdict(alert), "text": alert.text()}) + "\n")

    def destination(self, alert: Alert) -> str:
        return f"file {self.path}"


class SlackNotifierResource(NotifierResource):
    """Posts each alert to its pipeline's channel through dagster-slack."""

    slack: SlackResource
    api_url: str | None = Field(
        default=None, description="Slack's Web API base URL (slack-sdk's default when unset)."
    )
    timeout_s: int = Field(
        default=5,
        description="How long one request waits for Slack (slack-sdk retries a lost connection once). "
        "Short: the alert sensors must end well within their tick; an unsent alert is sent again.",
    )

    def notify(self, alert: Alert) -> None:
        client = self.slack.get_client()
        client.timeout = self.timeout_s  # slack-sdk's default is 30 s
        if self.api_url:
            client.base_url = self.api_url.rstrip("/") + "/"
        client.chat_postMessage(channel=alert.channel, text=alert.text())

    def destination(self, alert: Alert) -> str:
        return f"Slack channel {alert.channel}"  # the token and the API URL stay out of the UI
