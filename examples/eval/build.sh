#!/bin/sh
# Rebuilds calc.bundle and the reference patches of the eval task set:
# a tiny Python project whose base commit (tag "base") holds two seeded
# bugs, each fixed on its own branch (fix-add, fix-slug). Dates and
# authors are fixed, so the commits are the same on every run.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GIT_AUTHOR_NAME=eval GIT_AUTHOR_EMAIL=eval@example.com GIT_COMMITTER_NAME=eval GIT_COMMITTER_EMAIL=eval@example.com
export GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z
cd "$work"
git init -q -b main .
cat > calc.py <<'PY'
def add(a, b):
    """The sum of a and b."""
    return a - b


def mul(a, b):
    return a * b
PY
cat > text.py <<'PY'
import re


def slug(title):
    """A URL slug: lower case, words joined by dashes."""
    return re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-")
PY
cat > test_calc.py <<'PY'
from calc import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
PY
cat > test_text.py <<'PY'
from text import slug


def test_slug_lower():
    assert slug("Hello World") == "hello-world"


def test_slug_spaces():
    assert slug("a  b") == "a-b"
PY
git add -A && git commit -qm "calc and text, with their tests"
git tag base
git checkout -q -b fix-add base
sed -i 's/return a - b/return a + b/' calc.py
git commit -qam "calc: add adds"
git checkout -q -b fix-slug base
sed -i 's/title).strip("-")/title).strip("-").lower()/' text.py
git commit -qam "text: slugs are lower case"
git checkout -q main
git diff base fix-add > "$here/calc-add.patch"
git diff base fix-slug > "$here/text-slug.patch"
# The bundle holds the base alone: the fixes are not in the history an
# agent can read.
git bundle create -q "$here/calc.bundle" main refs/tags/base
