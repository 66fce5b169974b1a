#!/bin/sh
# Fails on its first attempt and passes on the next: the marker outlives the attempt's sandbox
# because FLAKY_MARKER_DIR (--test_env) is outside it (--sandbox_writable_path). Without the
# variable the test simply passes.
[ -n "$FLAKY_MARKER_DIR" ] || exit 0
marker="$FLAKY_MARKER_DIR/flaky_test.attempted"
if [ -e "$marker" ]; then
  echo "flaky_test: later attempt passes"
  exit 0
fi
: > "$marker"
echo "flaky_test: first attempt fails"
exit 1
