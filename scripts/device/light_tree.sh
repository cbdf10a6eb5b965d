#!/usr/bin/env bash
# Runs HERE, around a session's device calls: every call carries the working tree (tracked files and untracked ones
# git does not ignore) beside its part, 64 MiB in all, and docs/results/ grows by about 2 MB an archived run. The GPU
# machine reads only a few of those files (the recordings' archives and the runs kept unfinished), so for the calls
# the rest of docs/results/ is taken out of the index and ignored: on disk nothing changes, and nothing is committed.
#   scripts/device/light_tree.sh on     # before the session's first call; then part_size.py says what a part may be
#   scripts/device/light_tree.sh off    # after its last call, before any commit
#   scripts/device/light_tree.sh status
# KEEP (space-separated paths under docs/results/) names what still travels; by default the study's recordings and
# its runs in progress, and every policy comparison's recordings and measured rows (policy.sh reads both). `on` refuses when changes are staged (`off` restores the index of docs/results/ from HEAD, and
# would drop them) or when it is on already. While it is on, a pre-commit hook of its own refuses every commit (one
# would delete the files left behind from the repository); `off` removes the hook. Exit 2 on misuse.
set -euo pipefail
root="$(git rev-parse --show-toplevel)"
cd "$root"
gitdir="$(git rev-parse --absolute-git-dir)"
mark="$gitdir/cudanalyst-light-tree"
exclude="$gitdir/info/exclude"
hook="$gitdir/hooks/pre-commit"
hook_tag="# cudanalyst light_tree.sh hook"
# Every policy comparison's folder (policy-DATE), as a new comparison's recordings are kept in one of its own.
policy_folders="$(ls -d docs/results/policy-*/recordings docs/results/policy-*/measured 2>/dev/null | tr '\n' ' ' || true)"
keep="${KEEP:-docs/results/study-2026-12-02/recordings docs/results/study-2026-12-02/in-progress ${policy_folders% }}"
begin="# cudanalyst light_tree.sh: begin"
end="# cudanalyst light_tree.sh: end"

case "${1:-}" in
  on)
    [ ! -e "$mark" ] || { echo "light_tree.sh: already on (run 'off' first)" >&2; exit 2; }
    git diff --cached --quiet || { echo "light_tree.sh: changes are staged; commit or unstage them first" >&2; exit 2; }
    # Every tracked file under docs/results/ that is not under a KEEP path (git's own pathspecs: a KEEP path is a
    # file or a folder, never a prefix of a name).
    excludes=(); for k in $keep; do excludes+=(":(exclude)${k%/}"); done
    git ls-files -- docs/results "${excludes[@]}" > "$mark"
    [ -s "$mark" ] || { rm -f "$mark"; echo "light_tree.sh: nothing under docs/results/ to leave behind"; exit 0; }
    tr '\n' '\0' < "$mark" | xargs -0 git rm -q --cached --
    mkdir -p "$(dirname "$exclude")"
    { echo "$begin"; sed 's#^#/#' "$mark"; echo "$end"; } >> "$exclude"
    if [ ! -e "$hook" ]; then
      mkdir -p "$(dirname "$hook")"
      printf '#!/bin/sh\n%s\necho "light_tree.sh is on: its index leaves docs/results/ out; run scripts/device/light_tree.sh off first" >&2\nexit 1\n' \
        "$hook_tag" > "$hook"
      chmod +x "$hook"
    else
      echo "light_tree.sh: $hook exists already: commit nothing until 'off'" >&2
    fi
    echo "light_tree.sh: on: $(wc -l < "$mark") files of docs/results/ stay here (kept: $keep); 'off' before any commit"
    ;;
  off)
    [ -e "$mark" ] || { echo "light_tree.sh: not on"; exit 0; }
    tr '\n' '\0' < "$mark" | xargs -0 git reset -q HEAD --
    if [ -e "$exclude" ]; then
      sed -i "/^$begin\$/,/^$end\$/d" "$exclude"
    fi
    rm -f "$mark"
    if [ -e "$hook" ] && grep -qF "$hook_tag" "$hook"; then rm -f "$hook"; fi
    echo "light_tree.sh: off: the index is whole again"
    ;;
  status)
    if [ -e "$mark" ]; then echo "on: $(wc -l < "$mark") files left behind"; else echo "off"; fi
    ;;
  *) echo "usage: scripts/device/light_tree.sh on|off|status" >&2; exit 2 ;;
esac
