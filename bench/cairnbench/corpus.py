"""Test data: the man page corpus (every page under /usr/share/man,
decompressed), text made of man page lines, and random bytes."""

import gzip
import os
import random

MAN_ROOT = "/usr/share/man"


def man_page_paths(limit=None):
    """Regular files under /usr/share/man in sorted order; `limit` takes an even
    spread of them (every section and language), not just the first ones."""
    paths = []
    for root, dirs, files in os.walk(MAN_ROOT):
        dirs.sort()
        for name in sorted(files):
            p = os.path.join(root, name)
            if os.path.isfile(p) and not os.path.islink(p):
                paths.append(p)
    if limit is not None and len(paths) > limit:
        step = len(paths) / float(limit)
        paths = [paths[int(i * step)] for i in range(limit)]
    return paths


def build_corpus(ctx, limit):
    """Decompresses the pages into a temporary directory, once per run and size.

    Returns {"dir", "files", "bytes"}.
    """
    key = ("corpus", limit)
    if key in ctx.shared:
        return ctx.shared[key]
    out = ctx.mkdtemp("corpus")
    files = total = 0
    for src in man_page_paths(limit):
        rel = os.path.relpath(src, MAN_ROOT)
        if rel.endswith(".gz"):
            rel = rel[:-3]
        dst = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        try:
            if src.endswith(".gz"):
                with gzip.open(src, "rb") as f:
                    data = f.read()
            else:
                with open(src, "rb") as f:
                    data = f.read()
        except (OSError, EOFError):
            continue  # a damaged page is left out, the same for every tool
        with open(dst, "wb") as f:
            f.write(data)
        files += 1
        total += len(data)
    corpus = {"dir": out, "files": files, "bytes": total}
    ctx.shared[key] = corpus
    return corpus


def _pseudo_words():
    syl = ["ka", "lo", "mi", "nu", "re", "sa", "ti", "vo", "ba", "de", "fi", "go", "hu", "ja",
           "ke", "li", "mo", "ne", "pa", "ri", "so", "tu", "va", "we"]
    return [a + b for a in syl for b in syl]


def text_lines(ctx, pages=300):
    """Lines of English technical text (man page sources), for making text files."""
    if "lines" in ctx.shared:
        return ctx.shared["lines"]
    lines = []
    for p in man_page_paths(pages):
        try:
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rb") as f:
                for raw in f.read().splitlines():
                    try:
                        line = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        continue
                    if len(line) > 8:
                        lines.append(line)
        except (OSError, EOFError):
            continue
    if len(lines) < 1000:
        # No man pages here: sentences of pseudo-words instead.
        rng = random.Random(7)
        words = _pseudo_words()
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
                 for _ in range(20000)]
    ctx.shared["lines"] = lines
    return lines


def text_bytes(lines, size, rng):
    """`size` bytes of lines drawn at random: text that compresses like text but
    has no long repeats, so neither chunk dedup nor a compressor window can
    shortcut it."""
    parts, n = [], 0
    while n < size:
        batch = rng.choices(lines, k=4096)
        block = ("\n".join(batch) + "\n").encode()
        parts.append(block)
        n += len(block)
    return b"".join(parts)[:size]


def write_text_file(path, lines, size, seed):
    rng = random.Random(seed)
    with open(path, "wb") as f:
        left = size
        while left > 0:
            block = text_bytes(lines, min(left, 8 << 20), rng)
            f.write(block)
            left -= len(block)


def write_random_file(path, size):
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(left, 4 << 20)
            f.write(os.urandom(n))
            left -= n
