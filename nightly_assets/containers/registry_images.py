"""Whole images on OCI registries, through the client of registry.py: an image copied between
registries (every blob confirmed present before a tag is written), and the images only run tags
name expired."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nightly_assets.containers.registry import Manifest, OciRegistry, RegistryError


def copy_image(
    src: OciRegistry, src_repo: str, ref: str, dst: OciRegistry, dst_repo: str, tags: list[str]
) -> str:
    """Copy the image at `ref` (index or manifest, every blob) and point `tags` at it; returns its digest.

    Blobs first, then each is confirmed present, then the manifest by digest, then the tags:
    a crash at any point leaves no tag naming an incomplete image.
    """
    manifest = src.get_manifest(src_repo, ref)
    _copy_manifest(src, src_repo, manifest, dst, dst_repo)
    for tag in tags:
        dst.put_manifest(dst_repo, tag, manifest)
    return manifest.digest


def _copy_manifest(
    src: OciRegistry, src_repo: str, manifest: Manifest, dst: OciRegistry, dst_repo: str
) -> None:
    for child in manifest.child_digests():
        _copy_manifest(src, src_repo, src.get_manifest(src_repo, child), dst, dst_repo)
    for digest in manifest.blob_digests():
        if not dst.blob_exists(dst_repo, digest):
            dst.upload_blob(dst_repo, digest, lambda d=digest: src.stream_blob(src_repo, d))  # type: ignore[misc]
    missing = [d for d in manifest.blob_digests() if not dst.blob_exists(dst_repo, d)]
    if missing:
        raise RegistryError(
            f"{dst.name}: blobs {missing} still missing in {dst_repo} after upload; no tag written"
        )
    dst.put_manifest(dst_repo, manifest.digest, manifest)


@dataclass(frozen=True)
class RetentionResult:
    deleted_tags: list[str]
    kept_tags: list[str]
    deleted_digests: list[str]


def expire_run_tags(
    registry: OciRegistry,
    repo: str,
    pattern: str,
    expired: Callable[[dict[str, Any]], bool],
    *,
    dry_run: bool = False,
) -> RetentionResult:
    """Delete images tagged only by run tags (`pattern`) whose config `expired` says are too old.

    The distribution API deletes manifests, not tags: an image a live tag (such as `nightly-vllm-amd64`)
    still points at is kept, whatever its run tags say.
    """
    run_tag = re.compile(pattern)
    by_digest: dict[str, list[str]] = {}
    for tag in registry.tags(repo):
        digest = registry.manifest_digest(repo, tag)
        if digest:
            by_digest.setdefault(digest, []).append(tag)
    deleted_tags: list[str] = []
    kept: list[str] = []
    deleted_digests: list[str] = []
    for digest, tags in sorted(by_digest.items()):
        run_tags = [t for t in tags if run_tag.fullmatch(t)]
        if not run_tags:
            continue
        if len(run_tags) < len(tags) or not expired(registry.image_config(repo, digest)):
            kept.extend(run_tags)
            continue
        if not dry_run:
            registry.delete_manifest(repo, digest)
        deleted_tags.extend(run_tags)
        deleted_digests.append(digest)
    return RetentionResult(sorted(deleted_tags), sorted(kept), deleted_digests)
