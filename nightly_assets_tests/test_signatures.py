"""Failure signatures on realistic messages: what varies is replaced, the exception type and the
words are kept, and the same failure on two runs gives one signature."""

import pytest

from nightly_assets.testing.signatures import (
    common_resource,
    exception_line,
    group_line,
    grouped,
    is_generic,
    is_known_infra,
    resource,
    signature,
)

NCCL = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:{line}, unhandled system error (run with NCCL_DEBUG=INFO for details), "
    "NCCL version 2.20.5\nncclSystemError: System call failed or device error. Last error: rank {rank}"
)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "ConnectionRefusedError: [Errno 111] Connection refused to 127.0.0.1:5432",
            "ConnectionRefusedError: [Errno <n>] Connection refused to <addr>",
        ),
        (
            'psycopg.OperationalError: connection failed: connection to server at "10.0.3.17", port 5432'
            " failed: Connection refused\n\tIs the server running on that host and accepting TCP/IP?",
            'psycopg.OperationalError: connection failed: connection to server at "<addr>", port <n>'
            " failed: Connection refused",
        ),
        (
            "pymysql.err.OperationalError: (2003, \"Can't connect to MySQL server on 'db-3.ci' "
            '([Errno 111] Connection refused)")',
            "pymysql.err.OperationalError: (<n>, \"Can't connect to MySQL server on 'db-<n>.ci' "
            '([Errno <n>] Connection refused)")',
        ),
        (
            "requests.exceptions.ConnectTimeout: HTTPSConnectionPool(host='pypi.example.com', port=443):"
            " Max retries exceeded with url: /simple/torch/",
            "requests.exceptions.ConnectTimeout: HTTPSConnectionPool(host=<addr>, port=<n>):"
            " Max retries exceeded with url: <path>",
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total"
            " capacity of 79.15 GiB of which 3.94 MiB is free. Process 123456 has 79.14 GiB in use.",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate <n> MiB. GPU <n> has a total"
            " capacity of <n> GiB of which <n> MiB is free. Process <n> has <n> GiB in use.",
        ),
        (
            "RuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be"
            " asynchronously reported at some other API call",
            "RuntimeError: CUDA error: device-side assert triggered",
        ),
        (
            NCCL.format(line=1970, rank=3),
            "torch.distributed.DistBackendError: NCCL error in: <path>:<n>, unhandled system error"
            " (run with NCCL_DEBUG=INFO for details), NCCL version <n>",
        ),
        (
            "RuntimeError: The size of tensor a (128) must match the size of tensor b (64) at"
            " non-singleton dimension 1",
            "RuntimeError: The size of tensor a (<n>) must match the size of tensor b (<n>) at"
            " non-singleton dimension <n>",
        ),
        (
            "RuntimeError: shape '[4, 8, 16]' is invalid for input of size 500",
            "RuntimeError: shape '[<n>, …]' is invalid for input of size <n>",
        ),
        ("AssertionError: assert 3 == 4", "AssertionError: assert <n> == <n>"),
        (
            "AssertionError: expected float16 got 0x7f3a2c1b9d90 after 1.5e-3 s",
            "AssertionError: expected float16 got <hex> after <n> s",
        ),
        (
            'Traceback (most recent call last):\n  File "/home/ci/work/x.py", line 12, in <module>\n'
            "    main()\nFileNotFoundError: [Errno 2] No such file or directory:"
            " '/tmp/pytest-of-ci/pytest-42/test_x0/data.json'",
            "FileNotFoundError: [Errno <n>] No such file or directory: '<path>'",
        ),
        (
            "ValueError: run 3f2b8c1e-1111-4a4a-9c9c-0123456789ab of tmpk3j2h1x9 not at [fe80::1]:8080",
            "ValueError: run <id> of <tmp> not at <addr>",
        ),
        ("E   KeyError: 'weight'", "KeyError: 'weight'"),
    ],
)
def test_a_signature_keeps_the_type_and_the_words(message: str, expected: str) -> None:
    assert signature(message) == expected


def test_the_same_failure_on_other_ranks_lines_and_ports_is_one_signature() -> None:
    assert signature(NCCL.format(line=1970, rank=3)) == signature(NCCL.format(line=2011, rank=0))
    ports = {signature(f"ConnectionRefusedError: connect to localhost:{p} refused") for p in (5432, 40123)}
    assert ports == {"ConnectionRefusedError: connect to <addr> refused"}
    # a source file's line is no host:port
    assert signature("RuntimeError: failed at kernel.cu:412") == "RuntimeError: failed at kernel.cu:<n>"


def test_no_message_no_signature_and_a_long_one_is_cut() -> None:
    assert signature(None) is None
    assert signature("  \n") is None
    long = signature("RuntimeError: " + "word " * 200)
    assert long is not None and len(long) == 200 and long.endswith("…")


def test_the_exception_line_of_a_pytest_message() -> None:
    assert exception_line("assert x == y\n +  where x = f()") == "assert x == y"
    assert exception_line("setup failed\nE   OSError: disk\nmore") == "OSError: disk"


@pytest.mark.parametrize(
    ("message", "infra"),
    [
        ("ConnectionRefusedError: [Errno 111] Connection refused", True),
        ("requests.exceptions.ReadTimeout: HTTPConnectionPool(host='h', port=80): Read timed out.", True),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", True),
        ("OSError: [Errno 28] No space left on device", True),
        ("RuntimeError: NCCL error: unhandled cuda error, NCCL version 2.18.1", True),
        ("RuntimeError: CUDA error: GPU is lost", True),
        ("RuntimeError: Found no NVIDIA driver on your system", True),
        ("RuntimeError: CUDA error: device-side assert triggered", False),  # the test's kernel
        ("AssertionError: assert 3 == 4", False),
        ("TimeoutError: the scheduler did not finish in 30 s", False),  # the test's own wait
        ("selenium.common.exceptions.WebDriverException: unknown error", False),
    ],
)
def test_known_infrastructure_failures(message: str, infra: bool) -> None:
    sig = signature(message)
    assert sig is not None and is_known_infra(sig) is infra


def test_generic_signatures_say_nothing_beyond_values() -> None:
    assert is_generic("AssertionError: assert <n> == <n>")
    assert is_generic("AssertionError")
    assert is_generic("assert <n> != <n>")
    assert not is_generic("AssertionError: assert out_shape == <n>")
    assert not is_generic("LicenseError: no licence for feature vcs_sim")


def test_the_resource_a_message_names() -> None:
    assert resource("ConnectionRefusedError: connect to 127.0.0.1:5432") == "127.0.0.1:5432"
    assert resource("ConnectTimeout: HTTPSConnectionPool(host='pypi.example.com', port=443)") == (
        "pypi.example.com:443"
    )
    assert resource('OperationalError: connection to server at "10.0.3.17", port 5432 failed') == (
        "10.0.3.17:5432"
    )
    assert resource("torch.OutOfMemoryError: CUDA out of memory. GPU 3 has a total capacity") == "GPU 3"
    assert resource("RuntimeError: CUDA error on cuda:1: device lost") == "cuda:1"
    assert resource("RuntimeError: failed at kernel.cu:412") is None
    assert resource(None) is None
    assert common_resource(["x to db:5432", "y to db:5432", "z to cache:6379", None]) == "db:5432"


def test_failures_grouped_by_signature_largest_first() -> None:
    failures: list[tuple[str, str | None]] = [
        (f"t{i}", f"ConnectionRefusedError: connect to db:{5000 + i} refused") for i in range(3)
    ]
    failures += [("u", "KeyError: 'weight'"), ("v", None)]
    groups = grouped(failures)
    assert groups == [
        ("ConnectionRefusedError: connect to <addr> refused", ["t0", "t1", "t2"]),
        ("KeyError: 'weight'", ["u"]),
    ]
    assert group_line(*groups[0]) == "3 tests: `ConnectionRefusedError: connect to <addr> refused`"
    assert group_line(*groups[1]) == "u: `KeyError: 'weight'`"
