#!/usr/bin/env python3
"""clang-tidy over files, one process per file, with a result cache (what ccache is to a compiler).

    clang_tidy_cached.py COMPILE_DB_DIR FILE...

Runs `clang-tidy -p COMPILE_DB_DIR --quiet --warnings-as-errors='*' FILE` for every FILE on all
cores and prints the output of those that fail (exit 1). A file that passed is remembered under
a key that covers everything its result depends on: the SHA-256 of the clang-tidy version, the
.clang-tidy configuration, the file's compile command and its preprocessed translation unit
(every header it includes, as `cc -E` with the same flags expands it), with the checkout's
path taken out, so clones in other directories share it. An unchanged file is not
analysed again; any change to it, a header, a flag, the checks or the tool analyses it afresh.
Failures are never cached.

The cache lives in $TANDEM_LINT_CACHE, else $XDG_CACHE_HOME/tandem/clang-tidy, else
~/.cache/tandem/clang-tidy; TANDEM_LINT_CACHE=off (or an unwritable directory) analyses every
file every time.
"""

import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys


def cache_dir():
    d = os.environ.get("TANDEM_LINT_CACHE")
    if d == "off":
        return None
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "tandem", "clang-tidy")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError:
        return None
    return d if os.access(d, os.W_OK) else None


def preprocess_args(entry):
    """The entry's compile command turned into `cc -E` writing to stdout."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c" or a.startswith("-o") and len(a) > 2 or a.startswith("-M"):
            continue
        out.append(a)
    return out + ["-E", "-o", "-"], args


def key_of(entry, salt, root):
    cmd, args = preprocess_args(entry)
    pp = subprocess.run(cmd, cwd=entry.get("directory", "."), stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL)
    if pp.returncode != 0:
        return None  # let clang-tidy report it
    # the checkout's own path (in include flags, line markers, __FILE__) does not change a
    # result: clones in different directories share the cache
    h = hashlib.sha256()
    h.update(salt)
    h.update(json.dumps(args).replace(root, "@ROOT@").encode())
    h.update(pp.stdout.replace(root.encode(), b"@ROOT@"))
    return h.hexdigest()


def main():
    db_dir, files = sys.argv[1], sys.argv[2:]
    with open(os.path.join(db_dir, "compile_commands.json")) as f:
        db = {os.path.realpath(os.path.join(e.get("directory", "."), e["file"])): e
              for e in json.load(f)}
    cache = cache_dir()
    salt = b""
    if cache:
        version = subprocess.run(["clang-tidy", "--version"], stdout=subprocess.PIPE).stdout
        with open(".clang-tidy", "rb") as f:
            salt = version + f.read()
    jobs = os.cpu_count() or 1
    root = os.path.realpath(os.getcwd())

    def one(path):
        entry = db.get(os.path.realpath(path))
        key = key_of(entry, salt, root) if cache and entry else None
        marker = os.path.join(cache, key[:2], key) if key else None
        if marker and os.path.exists(marker):
            return path, 0, "", True
        r = subprocess.run(["clang-tidy", "-p", db_dir, "--quiet", "--warnings-as-errors=*",
                            path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode == 0 and marker:
            os.makedirs(os.path.dirname(marker), exist_ok=True)
            with open(marker, "w") as f:
                f.write(path + "\n")
        return path, r.returncode, r.stdout, False

    failed, hits = 0, 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        for path, rc, out, hit in ex.map(one, files):
            hits += hit
            if rc != 0:
                failed += 1
                sys.stdout.write(out)
    print("clang-tidy: %d files, %d unchanged since a clean run (cache %s)%s"
          % (len(files), hits, cache or "off", ", %d failed" % failed if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
