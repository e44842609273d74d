#!/bin/sh
# Installs Hearth from this unpacked tarball into PREFIX (default /usr/local), listing every
# file it writes in PREFIX/share/hearth/installed-files. `--uninstall` removes exactly the
# files listed there, and then the folders it leaves empty; nothing else (conversations,
# models and settings live in the user's home and stay).
#
#   ./install.sh [--prefix DIR]
#   ./install.sh --uninstall [--prefix DIR]
set -eu

prefix=/usr/local
action=install
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --uninstall) action=uninstall; shift ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
manifest="$prefix/share/hearth/installed-files"

if [ "$action" = uninstall ]; then
    [ -f "$manifest" ] || { echo "install.sh: $manifest not found: nothing to remove" >&2; exit 1; }
    while IFS= read -r f; do
        rm -f "$prefix/$f"
    done < "$manifest"
    rm -f "$manifest"
    # Folders the install made and left empty, deepest first.
    sort -r "$manifest.dirs" 2>/dev/null | while IFS= read -r d; do
        rmdir "$prefix/$d" 2>/dev/null || true
    done
    rm -f "$manifest.dirs"
    rmdir "$prefix/share/hearth" 2>/dev/null || true
    echo "Hearth removed from $prefix"
    exit 0
fi

here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$prefix/share/hearth"
: > "$manifest.new"
: > "$manifest.dirs.new"
# usr/bin -> PREFIX/bin, usr/share -> PREFIX/share.
(cd "$here/usr" && find . -type d | sed 's|^\./||' | sort) | while IFS= read -r d; do
    [ -n "$d" ] && [ "$d" != . ] || continue
    [ -d "$prefix/$d" ] || { mkdir -p "$prefix/$d"; echo "$d" >> "$manifest.dirs.new"; }
done
(cd "$here/usr" && find . -type f | sed 's|^\./||' | sort) | while IFS= read -r f; do
    mode=644
    case "$f" in bin/*) mode=755 ;; esac
    install -m "$mode" "$here/usr/$f" "$prefix/$f"
    echo "$f" >> "$manifest.new"
done
mv "$manifest.new" "$manifest"
cat "$manifest.dirs.new" >> "$manifest.dirs" 2>/dev/null || true
rm -f "$manifest.dirs.new"
echo "Hearth installed into $prefix ($(wc -l < "$manifest") files); remove with: $0 --uninstall --prefix $prefix"
