#!/bin/sh
# Runs a command and passes only when it exits 0 and its output (stdout and stderr together)
# has a line matching each extended regular expression, in the order given. ctest's
# PASS_REGULAR_EXPRESSION alone would pass a command that printed the lines and then failed.
#   expect_output.sh REGEX [REGEX ...] -- COMMAND [ARG ...]
patterns=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  patterns="$patterns$1
"
  shift
done
if [ $# -lt 2 ]; then
  echo "usage: $0 REGEX [REGEX ...] -- COMMAND [ARG ...]" >&2
  exit 2
fi
shift
output=$(mktemp) || exit 1
trap 'rm -f "$output"' EXIT
"$@" >"$output" 2>&1
status=$?
cat "$output"
if [ $status -ne 0 ]; then
  echo "FAIL: exit status $status: $*" >&2
  exit 1
fi
line=0
printf '%s' "$patterns" | {
  while IFS= read -r pattern; do
    found=$(grep -En -- "$pattern" "$output" | awk -F: -v after="$line" '$1 > after { print $1; exit }')
    if [ -z "$found" ]; then
      echo "FAIL: no line matching '$pattern' after line $line of the output" >&2
      exit 1
    fi
    line=$found
  done
}
