#!/usr/bin/env python3
"""test/bench/flamegraph.py: a flame graph, as SVG, of `perf script` output.

    perf script -i perf.data | python3 test/bench/flamegraph.py "title" >out.svg

Each sample's call stack is folded into one line (root first), identical
stacks are counted, and every frame is drawn as a box as wide as the share of
samples it appears in, its callers below it.  Colours tell where the code
lives: exactonce (orange), PostgreSQL (blue), libc and other libraries
(green), the kernel (grey).  Hovering a box shows its samples and share.
"""
import html
import re
import sys
from collections import defaultdict

WIDTH, ROW, FONT, MIN_PX = 1600, 17, 11, 0.3
COLOURS = {"exactonce": "#f0a050", "postgres": "#78a8e0", "kernel": "#b8b8b8", "lib": "#8cc878"}
FRAME = re.compile(r"^\s*[0-9a-f]+\s+(.+?)\s+\((.*)\)\s*$")


def fold(lines):
    """Counts of folded stacks: {(frame, ...) root first: samples}."""
    stacks, frames = defaultdict(int), []
    for line in lines:
        if not line.strip():
            if frames:
                stacks[tuple(reversed(frames))] += 1
            frames = []
            continue
        m = FRAME.match(line)
        if m:
            sym, dso = m.group(1), m.group(2)
            sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
            if sym == "[unknown]":
                sym = "[" + dso.rsplit("/", 1)[-1] + "]"
            frames.append((sym, dso))
    if frames:
        stacks[tuple(reversed(frames))] += 1
    return stacks


def kind(dso):
    if "exactonce" in dso:
        return "exactonce"
    if "kernel" in dso or dso.startswith("["):
        return "kernel"
    if dso.endswith("/postgres") or dso == "postgres":
        return "postgres"
    return "lib"


def tree(stacks):
    """A call tree: node = [samples, dso, {child name: node}]."""
    root = [0, "", {}]
    for stack, n in stacks.items():
        root[0] += n
        node = root
        for sym, dso in stack:
            node = node[2].setdefault(sym, [0, dso, {}])
            node[0] += n
    return root


def depth(node):
    return 1 + max((depth(c) for c in node[2].values()), default=0)


def draw(out, node, name, x, level, total, height):
    w = node[0] / total * WIDTH
    if w < MIN_PX:
        return
    y = height - (level + 1) * ROW
    tip = f"{name} ({node[0]} samples, {100.0 * node[0] / total:.2f}%)"
    out.append(f'<g><title>{html.escape(tip)}</title><rect x="{x:.2f}" y="{y}" width="{w:.2f}" '
               f'height="{ROW - 1}" fill="{COLOURS[kind(node[1])] if level else "#e0e0e0"}"/>')
    chars = int(w / (FONT * 0.6))
    if chars >= 3:
        label = name if len(name) <= chars else name[:chars - 2] + ".."
        out.append(f'<text x="{x + 3:.2f}" y="{y + ROW - 5}">{html.escape(label)}</text>')
    out.append("</g>")
    for child_name, child in sorted(node[2].items()):
        draw(out, child, child_name, x, level + 1, total, height)
        x += child[0] / total * WIDTH


def main():
    title = sys.argv[1] if len(sys.argv) > 1 else "flame graph"
    root = tree(fold(sys.stdin))
    if root[0] == 0:
        sys.exit("flamegraph: no samples with call stacks in the input")
    height = depth(root) * ROW + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'font-family="monospace" font-size="{FONT}">',
           f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="15">'
           f'{html.escape(title)} ({root[0]} samples)</text>']
    draw(out, root, "all", 0.0, 0, root[0], height)
    out.append("</svg>")
    print("\n".join(out))


if __name__ == "__main__":
    main()
