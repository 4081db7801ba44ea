#!/usr/bin/env python3
"""The longest C and C++ function bodies under src/ and bpf/ (or the given directories).

Usage: tools/longest-functions.py [-n N] [DIR...]    (N: 10; DIR: src bpf, from the repository root)

Prints N lines "LINES  FILE:LINE  NAME", longest first. LINES counts the lines from the first of the
head (return type, name, parameters) to the one holding the closing brace; a BPF program defined
through a macro (BPF_STRUCT_OPS(name, ...), BPF_PROG(name, ...)) is named by its first argument. A function is a brace block at file,
namespace, class or extern "C" scope whose head ends in a parameter list (optionally followed by
qualifiers, a trailing return type or a constructor's initialiser list); lambdas and blocks inside
a function count as part of it. A small lexer, not a compiler: comments, strings and preprocessor
lines are skipped, so a body split by #if branches with unbalanced braces would be mismeasured
(none is today). Repeatable: the same tree gives the same list, so it can be run on any commit:

    git worktree add /tmp/before 49d69ff && tools/longest-functions.py -C /tmp/before
"""
import argparse
import os
import re
import sys

EXTS = (".c", ".cc", ".cpp", ".h", ".hpp")
CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "return", "sizeof", "decltype"}
SCOPE_RE = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$|extern\s+\"C\"\s*$")


def strip(text):
    """Text with comments, string and character literals and preprocessor lines blanked (newlines
    kept, so line numbers stay right)."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            # A preprocessor line, with its continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        if c == "\n":
            out.append(c)
            at_line_start = True
            i += 1
            continue
        if c in " \t":
            out.append(c)
            i += 1
            continue
        at_line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        m = re.match(r'R"([^(\s]*)\(', text[i:i + 20]) if c == "R" else None
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
            continue
        if c == "'" and re.search(r"(?<![\w'])\d[\w']*$", text[max(0, i - 40):i]):
            # A digit separator (1'000'000), not a character literal.
            out.append(c)
            i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def function_name(head):
    """The name before a function head's parameter list, or None when the head is not one."""
    head = " ".join(head.split())
    # Drop a constructor's initialiser list: ") : a_(x), b_{y}" -> ")". Its colon is the first
    # single one at depth 0 after a closing parenthesis.
    depth = 0
    for k, ch in enumerate(head):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif (ch == ":" and depth == 0 and head[k - 1:k] != ":" and head[k + 1:k + 2] != ":"
              and head[:k].rstrip().endswith(")")):
            head = head[:k].rstrip()
            break
    # Drop what may follow the parameter list: qualifiers, noexcept(...), -> return type.
    head = re.sub(r"\s*->.*$", "", head)
    head = re.sub(r"(\s*\b(const|noexcept|override|final|volatile|mutable)\b(\s*\([^()]*\))?|\s*&&?)*$",
                  "", head)
    if not head.endswith(")"):
        return None
    depth = 0
    for k in range(len(head) - 1, -1, -1):
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                m = re.search(r"((?:[A-Za-z_~][\w]*\s*::\s*)*~?[A-Za-z_][\w]*(?:\s*<[^<>]*>)?"
                              r"|operator\s*[^\s\w(]+|operator\s+[\w:]+)\s*$", head[:k])
                if not m:
                    return None
                name = re.sub(r"\s+", "", m.group(1))
                if name.split("::")[-1] in CONTROL or name in CONTROL:
                    return None
                if re.fullmatch(r"BPF_[A-Z_]+", name):
                    arg = re.match(r"\s*(\w+)", head[k + 1:])
                    return arg.group(1) if arg else name
                return name
    return None


def functions(path):
    text = strip(open(path, encoding="utf-8", errors="replace").read())
    found = []
    # A stack of open blocks: "scope" (namespace, class, extern "C"), "function", or "other".
    stack = []
    head_start = 0
    line = 1
    open_fn = None  # (name, start line, depth) of the function being measured
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            in_function = any(k == "function" for k in stack)
            kind = "other"
            if not in_function:
                head = text[head_start:i]
                if SCOPE_RE.search(" ".join(head.split())):
                    kind = "scope"
                else:
                    name = function_name(head)
                    if name and "=" not in head.split("(")[0]:
                        kind = "function"
                        lead = len(head) - len(head.lstrip())
                        first = line - head.count("\n", lead)
                        open_fn = (name, first, len(stack))
            stack.append(kind)
            head_start = i + 1
        elif c == "}":
            if stack:
                kind = stack.pop()
                if kind == "function" and open_fn and open_fn[2] == len(stack):
                    found.append((line - open_fn[1] + 1, path, open_fn[1], open_fn[0]))
                    open_fn = None
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
        elif c == ":" and not any(k == "function" for k in stack):
            # "public:" and friends end a head; "::" and initialiser lists do not.
            if re.search(r"\b(public|private|protected)\s*$", text[head_start:i]):
                head_start = i + 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10, help="how many (10)")
    ap.add_argument("-C", dest="root", default=None,
                    help="the tree to measure (the repository holding this script)")
    ap.add_argument("dirs", nargs="*", default=["src", "bpf"])
    args = ap.parse_args()
    root = args.root or os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    found = []
    for d in args.dirs:
        for base, _, files in os.walk(os.path.join(root, d)):
            for f in sorted(files):
                if f.endswith(EXTS):
                    found += functions(os.path.join(base, f))
    found.sort(key=lambda t: (-t[0], t[1], t[2]))
    for n, path, start, name in found[:args.n]:
        print(f"{n:5d}  {os.path.relpath(path, root)}:{start}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
