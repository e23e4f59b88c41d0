#!/usr/bin/env bash
# Checks every relative link of README.md and docs/*.md: the file exists and,
# for a link with #anchor into a markdown file, one of its headings makes that
# anchor (GitHub's rule: lowercase, punctuation dropped, spaces to hyphens).
# Prints each broken link; exit 1 if there is one. Usage: docs/check-links.sh [ROOT]
set -u
cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" || exit 2
anchors() {
  grep -E '^#{1,6} ' "$1" | sed -E 's/^#+ //' | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9 _-]//g; s/ /-/g'
}
bad=0
for f in README.md docs/*.md; do
  d=$(dirname "$f")
  while read -r l; do
    case "$l" in ''|http://*|https://*|mailto:*) continue ;; esac
    path=${l%%#*} frag=
    [[ "$l" == *#* ]] && frag=${l#*#}
    if [ -z "$path" ]; then target=$f; else target=$d/$path; fi
    if [ ! -e "$target" ]; then
      echo "$f: broken link $l (no $target)"; bad=1; continue
    fi
    if [ -n "$frag" ] && [[ "$target" == *.md ]] && ! anchors "$target" | grep -qx -- "$frag"; then
      echo "$f: broken anchor $l (no such heading in $target)"; bad=1
    fi
  done < <(grep -oE '\]\([^)[:space:]]+\)' "$f" | sed -E 's/^\]\(//; s/\)$//')
done
exit $bad
