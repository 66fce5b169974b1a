"""The Bazel RBE resource: argv and rc file, probe and fallback, parsing, and real `bazel test` runs
(Debian's bazel-bootstrap 4.2.3) against a real BuildGrid remote cache."""

from __future__ import annotations

import json
import shlex
import socket
import stat
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nightly_assets.catalog.models import BazelBootstrap, BazelTests
from nightly_assets.rbe import (
    BazelBuildError,
    BazelConfigError,
    BazelRbeResource,
    BazelTestError,
    RemoteSettings,
    RemoteUnavailableError,
    TestTimeouts,
)
from nightly_assets.rbe import bazel as bz
from nightly_assets_tests.peers.bazel import BazelPeer
from nightly_assets_tests.peers.buildgrid import BuildGrid

JAX_FILTER = "gpu,cpu,-tpu,-config-cuda-only"  # the jax_rocm_rbe catalog's filter
SELECTED = {"//tests:pass_test", "//tests:fail_test", "//tests:flaky_test"}
SECRET = "s3cr3t-Token_value-0123456789"
MakeWorkspace = Callable[[], Path]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port held bound but not listening: connections are refused, and no one else can take it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        yield int(holder.getsockname()[1])


def _flaky_config(tmp_path: Path) -> dict[str, object]:
    marker_dir = tmp_path / "flaky-markers"
    marker_dir.mkdir()
    return {
        "test_env": {"FLAKY_MARKER_DIR": str(marker_dir)},
        "extra_args": [f"--sandbox_writable_path={marker_dir}"],
    }


# -- without Bazel --------------------------------------------------------------------------------


def test_process_counts_read_bazel_423_summary_lines() -> None:
    output = (
        "INFO: Elapsed time: 1.7s\nINFO: 16 processes: 6 remote cache hit, 6 internal, 4 linux-sandbox.\n"
    )
    assert bz.process_counts(output) == {
        "total": 16,
        "remote cache hit": 6,
        "internal": 6,
        "linux-sandbox": 4,
    }
    assert bz.process_counts("INFO: 1 process: 1 internal.\n") == {"total": 1, "internal": 1}
    assert bz.process_counts("INFO: 0 processes.\n") == {"total": 0}
    assert bz.process_counts("FAILED: Build did NOT complete successfully\n") == {}


def test_private_bazelrc_is_owner_only_and_keeps_each_option_whole(tmp_path: Path) -> None:
    rc_path = tmp_path / "rc" / "run.bazelrc"
    rc_path.parent.mkdir(mode=0o755)
    rc_path.write_text("left over\n")
    rc_path.chmod(0o644)
    option = f"--remote_header=authorization=Bearer {SECRET} 'q' \"d\" #not-a-comment"
    bz.write_private_bazelrc(rc_path, [option])
    assert stat.S_IMODE(rc_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(rc_path.parent.stat().st_mode) == 0o700
    lines = [line for line in rc_path.read_text().splitlines() if not line.startswith("#")]
    # Bazel tokenises rc lines as a POSIX shell does.
    assert [shlex.split(line) for line in lines] == [["build", option]]  # `bazel test` inherits it


def test_redactor_hides_the_value_its_words_and_quoted_form() -> None:
    quoted_secret = "it's-a-secret-too"
    redact = bz.Redactor.of([f"Bearer {SECRET}", quoted_secret])
    text = f"header Bearer {SECRET}; word {SECRET}; quoted {shlex.quote(quoted_secret)}; Bearer stays"
    assert redact(text) == "header ***; word ***; quoted ***; Bearer stays"


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("grpc://127.0.0.1", "expected grpc://host:port"),
        ("ftp://cache:21", "expected grpc://host:port"),
        ("grpc://127.0.0.1:notaport", "expected grpc://host:port"),
        ("https://user:hunter2-password@cache.example", "carries credentials"),
    ],
)
def test_bad_endpoints_are_named(url: str, complaint: str) -> None:
    with pytest.raises(BazelConfigError, match=complaint) as raised:
        bz.parse_endpoint("remote cache", url)
    assert "hunter2" not in str(raised.value)


def test_endpoint_without_scheme_is_grpcs_as_bazel_reads_it() -> None:
    assert bz.parse_endpoint("remote executor", "rbe.example") == bz.Endpoint(
        "rbe.example", "grpcs", "rbe.example", 443
    )


@pytest.mark.parametrize("bad", ["", "   ", "//tests:a\n//tests:b", "//tests:a\x00"])
def test_patterns_with_control_characters_are_refused(bad: str) -> None:
    with pytest.raises(BazelConfigError, match="targets"):
        bz.checked_patterns("targets", ["//ok:target", bad])


@pytest.mark.parametrize("bad", ["//tests:x", "-c", "--bad\nflag", "config=rocm"])
def test_extra_args_must_be_options(bad: str) -> None:
    with pytest.raises(BazelConfigError, match="extra_args"):
        bz.checked_options("extra_args", ["--config=rocm", bad])


def test_labels_map_to_testlogs_dirs() -> None:
    assert bz.label_dir("//tests:pass_test") == Path("tests/pass_test")
    assert bz.label_dir("//a/b:c") == Path("a/b/c")
    assert bz.label_dir("//a/b") == Path("a/b/b")
    assert bz.label_dir("@xla//xla/tests:t") == Path("external/xla/xla/tests/t")
    for bad in ("tests:x", "//../x:y", "//"):
        with pytest.raises(ValueError, match="expected //package:name"):
            bz.label_dir(bad)


def test_build_events_give_each_tested_target_status_and_attempts(tmp_path: Path) -> None:
    bep = tmp_path / "bep.json"
    events = [
        {"id": {"started": {}}, "started": {"command": "test"}},
        {
            "id": {"testSummary": {"label": "//t:f"}},
            "testSummary": {"overallStatus": "FLAKY", "totalRunCount": 2},
        },
        {
            "id": {"testSummary": {"label": "//t:p"}},
            "testSummary": {"overallStatus": "PASSED", "totalRunCount": 1},
        },
    ]
    bep.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    summaries = bz.read_test_summaries(bep)
    assert summaries == {
        "//t:f": bz.TargetSummary("//t:f", "FLAKY", 2),
        "//t:p": bz.TargetSummary("//t:p", "PASSED", 1),
    }
    bep.write_text(json.dumps(events[0]) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bep\.json: line 2 is not JSON"):
        bz.read_test_summaries(bep)


def test_only_this_runs_targets_are_collected(tmp_path: Path) -> None:
    testlogs = tmp_path / "bazel-testlogs"
    for relative in ("tests/a/test.xml", "tests/a/test_attempts/attempt_1.xml", "tests/old/test.xml"):
        (testlogs / relative).parent.mkdir(parents=True, exist_ok=True)
        (testlogs / relative).write_text("<testsuites/>")
    (testlogs / "tests/a/test.outputs").mkdir()
    (testlogs / "tests/a/test.outputs/test.xml").write_text("an undeclared output, not a report")
    dest = tmp_path / "copy"
    (dest / "stale").mkdir(parents=True)

    bz.collect_testlogs(testlogs, ["//tests:a"], dest)

    copied = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert copied == ["tests/a/test.xml", "tests/a/test_attempts/attempt_1.xml"]


def test_probe_names_a_refused_port(closed_port: int) -> None:
    endpoint = bz.parse_endpoint("remote cache", f"grpc://127.0.0.1:{closed_port}")
    reason = bz.probe(endpoint, "nightly", timeout_s=1)
    assert reason is not None and f"127.0.0.1:{closed_port} does not answer" in reason


def test_probe_gives_up_on_a_listener_that_never_speaks_grpc() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)  # the kernel accepts connections; nothing ever answers on them
        endpoint = bz.parse_endpoint("remote cache", f"grpc://127.0.0.1:{silent.getsockname()[1]}")
        reason = bz.probe(endpoint, "nightly", timeout_s=0.5)
    assert reason is not None and "does not answer gRPC" in reason


def test_down_endpoint_without_fallback_raises_before_bazel_runs(tmp_path: Path, closed_port: int) -> None:
    (tmp_path / "WORKSPACE").write_text("")
    resource = BazelRbeResource(
        bazel=str(tmp_path / "no-bazel-here"),  # reaching Bazel would fail differently
        remote=RemoteSettings(
            cache=f"grpc://127.0.0.1:{closed_port}", fallback_to_local=False, probe_timeout_s=1
        ),
    )
    with pytest.raises(RemoteUnavailableError, match="fallback_to_local is off"):
        resource.run_tests(tmp_path, BazelTests(targets=["//..."]), suite="s", out_dir=tmp_path / "out")


def test_a_folder_without_workspace_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BazelTestError, match="expected a Bazel workspace"):
        BazelRbeResource().run_tests(tmp_path, BazelTests(targets=["//..."]), suite="s", out_dir=tmp_path)


# -- real Bazel -----------------------------------------------------------------------------------


@pytest.mark.bazel
def test_tag_filters_and_flaky_attempts(
    bazel_peer: BazelPeer, make_bazel_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    workspace = make_bazel_workspace()
    resource = bazel_peer.resource(
        test_timeouts=TestTimeouts(short=30, moderate=60), **_flaky_config(tmp_path)
    )
    tests = BazelTests(targets=["//tests/..."], tag_filters=JAX_FILTER, flaky_test_attempts=3)

    run = resource.run_tests(workspace, tests, suite="multigpu", out_dir=tmp_path / "out")

    assert (run.exit_code, run.mode, run.fallback_reason) == (bz.EXIT_TESTS_FAILED, "local", None)
    assert set(run.targets) == SELECTED
    cases = {case.classname: case for case in run.report.cases}
    assert set(cases) == SELECTED
    assert cases["//tests:pass_test"].outcome == "passed"
    assert (cases["//tests:flaky_test"].outcome, cases["//tests:flaky_test"].attempts) == ("passed", 2)
    assert [c.classname for c in run.report.flaky] == ["//tests:flaky_test"]
    assert (cases["//tests:fail_test"].outcome, cases["//tests:fail_test"].attempts) == ("error", 3)
    assert run.targets["//tests:flaky_test"].status == "FLAKY"
    assert (run.testlogs_dir / "tests/flaky_test/test_attempts/attempt_1.xml").is_file()
    assert "--test_timeout=30,60,900,3600" in run.command and "--flaky_test_attempts=3" in run.command
    assert (
        "flaky_test: first attempt fails"
        in (run.testlogs_dir / "tests/flaky_test/test_attempts/attempt_1.log").read_text()
    )
    assert run.process_counts["total"] > 0 and run.log_path.read_text().count("FLAKY") >= 1
    assert run.metadata()["flaky"] == 1

    # bazel-testlogs still holds the first run's reports; a run that tests nothing reports nothing.
    empty = resource.run_tests(
        workspace,
        BazelTests(targets=["//tests/..."], tag_filters="no-such-tag"),
        suite="s",
        out_dir=tmp_path / "o2",
    )
    assert (empty.exit_code, empty.report.total, dict(empty.targets)) == (bz.EXIT_NO_TESTS, 0, {})


@pytest.mark.bazel
def test_fresh_output_base_is_served_from_the_remote_cache(
    bazel_peer: BazelPeer, buildgrid: BuildGrid, make_bazel_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    remote = RemoteSettings(
        cache=buildgrid.url, instance_name=buildgrid.instance_name, headers={"x-team": "ci"}
    )
    resource = bazel_peer.resource(remote=remote, **_flaky_config(tmp_path))
    tests = BazelTests(targets=["//tests/..."], tag_filters=JAX_FILTER, flaky_test_attempts=2)

    first = resource.run_tests(make_bazel_workspace(), tests, suite="s", out_dir=tmp_path / "first")
    second = resource.run_tests(make_bazel_workspace(), tests, suite="s", out_dir=tmp_path / "second")

    assert (first.mode, second.mode) == ("remote", "remote")
    assert f"--remote_cache={buildgrid.url}" in second.command
    assert "--remote_header=x-team=ci" in second.command
    assert second.remote_cache_hits > 0 and second.metadata()["remote_cache_hits"] == second.remote_cache_hits
    assert "(cached) PASSED" in second.log_path.read_text()
    outcomes = {case.classname: case.outcome for case in second.report.cases}
    assert outcomes == {
        "//tests:pass_test": "passed",
        "//tests:flaky_test": "passed",
        "//tests:fail_test": "error",
    }


@pytest.mark.bazel
def test_credentials_stay_in_the_private_rc_file(
    bazel_peer: BazelPeer,
    buildgrid: BuildGrid,
    make_bazel_workspace: MakeWorkspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NIGHTLY_TEST_RBE_TOKEN", f"Bearer {SECRET}")
    remote = RemoteSettings(
        cache=buildgrid.url,
        instance_name=buildgrid.instance_name,
        header_envs={"authorization": "NIGHTLY_TEST_RBE_TOKEN"},
    )
    # --announce_rc makes Bazel print every rc option, the secret one included: redaction must catch it.
    resource = bazel_peer.resource(remote=remote, extra_args=["--announce_rc"])

    run = resource.run_tests(
        make_bazel_workspace(), BazelTests(targets=["//tests:pass_test"]), suite="s", out_dir=tmp_path / "out"
    )

    log = run.log_path.read_text()
    assert run.mode == "remote" and run.exit_code == bz.EXIT_PASSED
    assert f"--remote_header=authorization={bz.REDACTED}" in log  # Bazel did print it, redacted
    for text in (log, run.command_line, repr(run), repr(run.metadata()), repr(resource)):
        assert SECRET not in text
    assert not list((bazel_peer.output_user_root / "nightly-rc").glob("*.bazelrc"))  # removed after the run


@pytest.mark.bazel
def test_missing_secret_variable_is_named_and_nothing_runs(buildgrid: BuildGrid, tmp_path: Path) -> None:
    (tmp_path / "WORKSPACE").write_text("")
    remote = RemoteSettings(cache=buildgrid.url, header_envs={"authorization": "NIGHTLY_TEST_UNSET_TOKEN"})
    resource = BazelRbeResource(bazel=str(tmp_path / "no-bazel-here"), remote=remote)
    with pytest.raises(BazelConfigError, match="NIGHTLY_TEST_UNSET_TOKEN is not set"):
        resource.run_tests(tmp_path, BazelTests(targets=["//tests:pass_test"]), suite="s", out_dir=tmp_path)
    assert not (tmp_path / "bazel-test.log").exists()


@pytest.mark.bazel
def test_down_endpoint_falls_back_to_a_local_build(
    bazel_peer: BazelPeer, make_bazel_workspace: MakeWorkspace, tmp_path: Path, closed_port: int
) -> None:
    down = f"grpc://127.0.0.1:{closed_port}"
    resource = bazel_peer.resource(remote=RemoteSettings(executor=down, cache=down, probe_timeout_s=1))
    tests = BazelTests(targets=["//tests:pass_test", "//tests:untagged_test"])

    run = resource.run_tests(make_bazel_workspace(), tests, suite="s", out_dir=tmp_path / "out")

    assert run.mode == "local-fallback"
    assert run.fallback_reason is not None and f"{down} does not answer" in run.fallback_reason
    assert not any(arg.startswith("--remote") for arg in run.command)
    assert {c.classname: c.outcome for c in run.report.cases} == {
        "//tests:pass_test": "passed",
        "//tests:untagged_test": "error",
    }
    assert run.metadata()["bazel_mode"] == "local-fallback"


@pytest.mark.bazel
def test_remote_error_during_the_build_reruns_locally(
    bazel_peer: BazelPeer,
    buildgrid: BuildGrid,
    make_bazel_workspace: MakeWorkspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # BuildGrid answers the probe; then Bazel refuses to send Google credentials over plain gRPC
    # (exit 34), which also shows the credentials file reached Bazel through the private rc file.
    credentials = tmp_path / f"{SECRET}.json"
    credentials.write_text(
        json.dumps({"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"})
    )
    monkeypatch.setenv("NIGHTLY_TEST_GOOGLE_CREDENTIALS", str(credentials))
    remote = RemoteSettings(
        cache=buildgrid.url,
        instance_name=buildgrid.instance_name,
        google_credentials_env="NIGHTLY_TEST_GOOGLE_CREDENTIALS",
    )

    run = bazel_peer.resource(remote=remote).run_tests(
        make_bazel_workspace(), BazelTests(targets=["//tests:pass_test"]), suite="s", out_dir=tmp_path / "out"
    )

    assert (run.mode, run.exit_code) == ("local-fallback", bz.EXIT_PASSED)
    assert run.fallback_reason is not None and "exited 34" in run.fallback_reason
    assert "UNAUTHENTICATED: Credentials require channel with PRIVACY_AND_INTEGRITY" in run.fallback_reason
    remote_log = (tmp_path / "out" / "bazel-test-remote.log").read_text()
    for text in (
        remote_log,
        run.log_path.read_text(),
        run.command_line,
        repr(run.metadata()),
    ):
        assert SECRET not in text
    assert [c.outcome for c in run.report.cases] == ["passed"]


@pytest.mark.bazel
def test_shell_metacharacters_reach_bazel_literally_and_run_nothing(
    bazel_peer: BazelPeer, make_bazel_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    workspace = make_bazel_workspace()
    canary = tmp_path / "canary"
    resource = bazel_peer.resource()
    # Bazel names each as one whole pattern; "--nobuild" after `--` is the subtractive pattern
    # "-nobuild", not the option.
    hostile = {
        f"//tests:pass_test;touch {canary}": f"//tests:pass_test;touch {canary}",
        f"$(touch {canary})": f"$(touch {canary})",
        f"`touch {canary}`|true": f"`touch {canary}`|true",
        "--nobuild": "-nobuild",
    }
    for target, as_bazel_names_it in hostile.items():
        with pytest.raises(BazelTestError, match=r"exited 1 \(build failed\)") as raised:
            resource.run_tests(workspace, BazelTests(targets=[target]), suite="s", out_dir=tmp_path / "o1")
        assert f"'{as_bazel_names_it}'" in str(raised.value)

    # A tag filter is one argument too: "cpu" still selects pass_test, the rest is an odd tag name.
    odd_filter = f"cpu,$(touch {canary}),-`touch {canary}`"
    run = resource.run_tests(
        workspace,
        BazelTests(targets=["//tests/..."], tag_filters=odd_filter),
        suite="s",
        out_dir=tmp_path / "o2",
    )
    assert f"--test_tag_filters={odd_filter}" in run.command
    assert [c.classname for c in run.report.cases] == ["//tests:pass_test"]
    assert not canary.exists()


# -- bazel build: wheels ---------------------------------------------------------------------------

WHEEL_TARGETS = ["//wheels:nightlybazel_wheel", "//wheels:house", "//wheels:not_a_wheel"]
BUILT_WHEELS = ["nightlybazel-0.1.0-py3-none-any.whl", "nightlybazel_extra-0.2.0-py3-none-any.whl"]


def test_build_outputs_follow_named_sets_and_find_remote_ones_under_bazel_out(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    bin_dir = workspace / "bazel-out/k8-fastbuild/bin"
    bin_dir.mkdir(parents=True)
    for name in ("a.whl", "b c.whl", "d.whl"):
        (bin_dir / name).write_text(name)
    prefix = ["bazel-out", "k8-fastbuild", "bin"]
    remote = {"name": "d.whl", "uri": "bytestream://rbe/blobs/abc/10", "pathPrefix": prefix}
    a = {"name": "a.whl", "uri": f"file://{bin_dir}/a.whl", "pathPrefix": prefix}
    events = [
        {"id": {"namedSet": {"id": "1"}}, "namedSetOfFiles": {"files": [a]}},
        {
            "id": {"namedSet": {"id": "0"}},
            "namedSetOfFiles": {
                "files": [{"name": "b c.whl", "uri": f"file://{bin_dir}/b%20c.whl"}],
                "fileSets": [{"id": "1"}],
            },
        },
        {
            "id": {"targetCompleted": {"label": "//w:both"}},
            "completed": {"success": True, "outputGroup": [{"name": "default", "fileSets": [{"id": "0"}]}]},
        },
        {"id": {"targetCompleted": {"label": "//w:failed"}}, "completed": {"success": False}},
        {
            "id": {"targetCompleted": {"label": "//w:old"}},
            "completed": {"success": True, "importantOutput": [remote]},
        },
    ]
    bep = tmp_path / "bep.json"
    bep.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    assert bz.read_build_outputs(bep, workspace) == {
        "//w:both": [bin_dir / "a.whl", bin_dir / "b c.whl"],
        "//w:old": [bin_dir / "d.whl"],  # a remote cache's bytestream:// output, downloaded
    }
    (bin_dir / "d.whl").unlink()  # --remote_download_minimal: it never reached this machine
    with pytest.raises(
        ValueError, match=r"//w:old: output 'd.whl' \(bytestream://rbe/blobs/abc/10\) is not on this"
    ):
        bz.read_build_outputs(bep, workspace)


@pytest.mark.bazel
def test_build_copies_the_wheels_of_the_built_targets_only(
    bazel_peer: BazelPeer, make_bazel_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    workspace = make_bazel_workspace()
    resource = bazel_peer.resource()
    dest = tmp_path / "dist"
    (dest).mkdir()
    run = resource.build(workspace, WHEEL_TARGETS, out_dir=tmp_path / "out", dest=dest)

    assert (run.mode, run.exit_code, run.fallback_reason) == ("local", bz.EXIT_PASSED, None)
    assert [p.name for p in run.outputs] == BUILT_WHEELS and all(p.parent == dest for p in run.outputs)
    assert sorted(p.name for p in dest.iterdir()) == BUILT_WHEELS  # notes.txt is not a wheel
    assert dict(run.by_target) == {
        "//wheels:nightlybazel_wheel": (BUILT_WHEELS[0],),
        "//wheels:house": (BUILT_WHEELS[1],),  # the wheel inside a declared output folder
    }
    with zipfile.ZipFile(run.outputs[0]) as wheel:
        assert "def answer()" in wheel.read("nightlybazel/__init__.py").decode()
    assert run.command[run.command.index("--") + 1 :] == tuple(WHEEL_TARGETS)
    assert (
        run.log_path.name == "bazel-build.log" and "Build completed successfully" in run.log_path.read_text()
    )
    assert run.metadata()["outputs"] == 2 and run.metadata()["bazel_mode"] == "local"

    # A wheel two targets give (the rule and a filegroup of it) is one output.
    both = resource.build(
        workspace,
        ["//wheels:nightlybazel_wheel", "//wheels:all_wheels"],
        out_dir=tmp_path / "o",
        dest=tmp_path / "d",
    )
    assert [p.name for p in both.outputs] == [BUILT_WHEELS[0]] and len(both.by_target) == 2

    # Only this run's targets count: bazel-bin still holds both wheels from the first build.
    again = resource.build(workspace, ["//wheels:house"], out_dir=tmp_path / "out", dest=tmp_path / "dist2")
    assert [p.name for p in again.outputs] == [BUILT_WHEELS[1]]


@pytest.mark.bazel
def test_checkouts_with_one_output_key_build_incrementally_in_one_output_base(
    bazel_peer: BazelPeer, make_bazel_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    resource = bazel_peer.resource()
    key = f"t{tmp_path.name[-12:]}.target.repo".replace("_", "-")
    first, second = make_bazel_workspace(), make_bazel_workspace()  # two nights' checkouts
    try:
        built = [
            resource.build(
                ws,
                ["//wheels:nightlybazel_wheel"],
                out_dir=tmp_path / f"o{i}",
                dest=tmp_path / f"d{i}",
                output_key=key,
            )
            for i, ws in enumerate((first, second))
        ]
        assert f"--output_base={bazel_peer.output_user_root / 'bases' / key}" in built[1].command
        assert built[0].process_counts.get("linux-sandbox", 0) >= 1  # the first night built the wheel
        assert built[1].process_counts.get("linux-sandbox", 0) == 0, built[1].process_counts  # up to date
        assert (tmp_path / "d1" / BUILT_WHEELS[0]).read_bytes() == (
            tmp_path / "d0" / BUILT_WHEELS[0]
        ).read_bytes()
    finally:
        resource.shutdown(second, expunge=True, output_key=key)
    with pytest.raises(BazelConfigError, match=r"output_key '\.\./x'"):
        resource.build(
            first, ["//wheels:house"], out_dir=tmp_path / "o", dest=tmp_path / "d", output_key="../x"
        )


@pytest.mark.bazel
def test_a_failed_build_or_one_without_wheels_is_named(
    bazel_peer: BazelPeer, make_bazel_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    workspace = make_bazel_workspace()
    resource = bazel_peer.resource()
    with pytest.raises(BazelBuildError, match=r"bazel build .* exited 1 \(build failed\)") as raised:
        resource.build(workspace, ["//wheels:broken_wheel"], out_dir=tmp_path / "o1", dest=tmp_path / "d1")
    assert "//wheels:broken_wheel" in str(raised.value) and "broken_wheel: cannot build" in str(raised.value)
    with pytest.raises(BazelBuildError, match=r"no output matching '\*\.whl' \(outputs: notes\.txt\)"):
        resource.build(workspace, ["//wheels:not_a_wheel"], out_dir=tmp_path / "o2", dest=tmp_path / "d2")
    assert not (tmp_path / "d2").exists()
    with pytest.raises(BazelConfigError, match=r"args: 'opt' is not a Bazel option"):
        resource.build(
            workspace, ["//wheels:house"], out_dir=tmp_path / "o3", dest=tmp_path / "d3", options=["opt"]
        )


@pytest.mark.bazel
def test_a_fresh_build_is_served_from_the_remote_cache_and_falls_back_when_it_is_down(
    bazel_peer: BazelPeer,
    buildgrid: BuildGrid,
    make_bazel_workspace: MakeWorkspace,
    tmp_path: Path,
    closed_port: int,
) -> None:
    remote = RemoteSettings(cache=buildgrid.url, instance_name=buildgrid.instance_name)
    resource = bazel_peer.resource(remote=remote)
    targets = ["//wheels:nightlybazel_wheel", "//wheels:house"]

    first = resource.build(make_bazel_workspace(), targets, out_dir=tmp_path / "o1", dest=tmp_path / "d1")
    second = resource.build(make_bazel_workspace(), targets, out_dir=tmp_path / "o2", dest=tmp_path / "d2")

    assert (first.mode, second.mode) == ("remote", "remote")
    assert second.remote_cache_hits >= 2, second.process_counts
    assert [p.read_bytes() for p in first.outputs] == [p.read_bytes() for p in second.outputs]

    down = f"grpc://127.0.0.1:{closed_port}"
    resource = bazel_peer.resource(remote=RemoteSettings(cache=down, probe_timeout_s=1))
    fallback = resource.build(make_bazel_workspace(), targets, out_dir=tmp_path / "o3", dest=tmp_path / "d3")
    assert fallback.mode == "local-fallback" and f"{down} does not answer" in (fallback.fallback_reason or "")
    assert not any(arg.startswith("--remote") for arg in fallback.command)
    local = resource.build(
        make_bazel_workspace(), targets, out_dir=tmp_path / "o4", dest=tmp_path / "d4", use_remote=False
    )
    assert (local.mode, local.fallback_reason) == ("local", None)  # not even probed


def _bazel_source(tmp_path: Path, script: str) -> Path:
    """A source tree whose compile.sh 'bootstraps' Bazel: it leaves output/bazel, a client that
    hands over to the installed Bazel (building the real one takes an hour)."""
    source = tmp_path / "bazel-src"
    source.mkdir()
    (source / "compile.sh").write_text(script)
    return source


BOOTSTRAP = BazelBootstrap(
    repo="bazel", command=["bash", "./compile.sh"], binary="output/bazel", env={"X": "1 2"}
)


@pytest.mark.bazel
def test_bazel_bootstrapped_from_source_builds_and_is_kept_per_commit(
    bazel_peer: BazelPeer, make_bazel_workspace: MakeWorkspace, tmp_path: Path
) -> None:
    source = _bazel_source(
        tmp_path,
        'set -eu\nmkdir -p output\necho "bootstrapping with X=$X"\n'
        f"printf '#!/bin/sh\\nexec {bazel_peer.binary} \"$@\"\\n' > output/bazel\nchmod +x output/bazel\n",
    )
    resource = bazel_peer.resource()
    commit = "0123456789abcdef0123456789abcdef01234567"
    bazel_peer.forget_bootstraps(commit)

    binary = resource.bootstrap(source, commit, BOOTSTRAP, log_path=tmp_path / "bootstrap.log")

    assert binary.parent.parent == bazel_peer.output_user_root / "bootstrapped" and binary.name == "bazel"
    assert binary.parent.name.startswith(f"{commit}-")  # and the recipe's hash
    assert "bootstrapping with X=1 2" in (tmp_path / "bootstrap.log").read_text()
    run = resource.build(
        make_bazel_workspace(), ["//wheels:nightlybazel_wheel"], out_dir=tmp_path / "o", dest=tmp_path / "d",
        bazel=str(binary),
    )  # fmt: skip
    assert run.command[0] == str(binary) and run.bazel_binary == str(binary)
    assert [p.name for p in run.outputs] == [BUILT_WHEELS[0]]

    (source / "compile.sh").write_text("exit 1\n")  # the same commit is not bootstrapped again
    assert resource.bootstrap(source, commit, BOOTSTRAP, log_path=tmp_path / "again.log") == binary
    assert "reused" in (tmp_path / "again.log").read_text()
    # Another recipe at the same commit is another binary: it is bootstrapped, not reused.
    other = BOOTSTRAP.model_copy(update={"env": {"X": "3"}})
    (source / "compile.sh").write_text("echo 'other recipe' >&2\nexit 4\n")
    with pytest.raises(BazelBuildError, match="exited 4"):
        resource.bootstrap(source, commit, other, log_path=tmp_path / "other.log")


def test_a_failed_bootstrap_is_named(tmp_path: Path) -> None:
    resource = BazelRbeResource(output_user_root=str(tmp_path / "root"))
    source = _bazel_source(tmp_path, "echo 'ERROR: no JDK found' >&2\nexit 3\n")
    with pytest.raises(
        BazelBuildError, match=r"bootstrap of Bazel from bazel \(bash ./compile.sh\) exited 3"
    ):
        resource.bootstrap(source, "abc1234", BOOTSTRAP, log_path=tmp_path / "b.log")
    (source / "compile.sh").write_text("echo done\n")
    with pytest.raises(BazelBuildError, match=r"left no executable output/bazel"):
        resource.bootstrap(source, "abc1234", BOOTSTRAP, log_path=tmp_path / "b.log")
    no_such = BOOTSTRAP.model_copy(update={"command": ["no-such-compiler", "--all"]})
    with pytest.raises(BazelBuildError, match=r"\(no-such-compiler --all\): cannot run 'no-such-compiler'"):
        resource.bootstrap(source, "abc1234", no_such, log_path=tmp_path / "b.log")
    with pytest.raises(BazelBuildError, match=r"commit 'main; rm -rf /' is not a git SHA"):
        resource.bootstrap(source, "main; rm -rf /", BOOTSTRAP, log_path=tmp_path / "b.log")
    assert not (tmp_path / "root" / "bootstrapped").exists()
