#!/usr/bin/env python3
"""Compares the BPF instructions of two objects, function by function, and their initialised data.

Usage: tools/bpf-objdiff.py [--rename OLD=NEW ...] [--objdump PATH] OLD.bpf.o NEW.bpf.o

For a change that should not change what the verifier sees (a file split into headers, renamed
helpers and variables): every function (each program and each BPF-to-BPF callee in .text) is
disassembled with llvm-objdump-19 (Debian's llvm-19) and normalised, so that what a split moves
does not show:
  - a call or a 64-bit load relocated against a section (.text, .bss, .data, .rodata), and a call
    within .text that needs no relocation, name the function or variable at that offset (the
    order of functions in .text and of variables in .bss follows the order of definitions);
  - jump targets are kept as relative offsets (llvm-objdump's labels number blocks by function
    order, which moves too);
  - --rename maps a symbol of OLD to its new name (a renamed global function, map or variable).
Then the instructions of each function are compared, and the bytes of every initialised variable
(.data, .rodata: knob defaults, format strings; scx_bpf_error()'s carry the file and line of the
call, so those move with the code). Prints, per function, "same" or a diff of the normalised
instructions; exits 0 when everything is the same, 1 otherwise. Example (the split of issue 23):

    tools/bpf-objdiff.py /tmp/before/zernel.bpf.o build/bpf/zernel.bpf.o \
      --rename zernel_bw_charge=zernel_quota_charge --rename bw_nr=nr_quotas ...
"""
import argparse
import difflib
import re
import subprocess
import sys

INSN_RE = re.compile(r"^\s*(\d+):\t((?:[0-9a-f]{2} )*[0-9a-f]{2})\t(.*)$")
PCREL_CALL_RE = re.compile(r"^call (-?0x[0-9a-f]+)$")
FUNC_RE = re.compile(r"^([0-9a-f]+) <([^>]+)>:$")
RELOC_RE = re.compile(r"^\s+([0-9a-f]+):\s+(R_BPF_\w+)\s+(\S+)$")
SECTION_RE = re.compile(r"^Disassembly of section (\S+):$")
IMM_RE = re.compile(r"(-?0x[0-9a-f]+|-?\d+)( ll)?$")
LABEL_RE = re.compile(r" <[^>]+>$")
DATA_SECTIONS = (".data", ".rodata", ".bss")


def run(objdump, *args):
    return subprocess.run([objdump, *args], check=True, capture_output=True, text=True).stdout


def symbols(objdump, obj):
    """{section: [(offset, size, name)]} of the named objects and functions."""
    out = {}
    for line in run(objdump, "-t", obj).splitlines():
        # "0000000000004080 l     O .bss	0000000000000008 vtime_now"
        m = re.match(r"^([0-9a-f]+) (.{7}) (\S+)\s+([0-9a-f]+) (.*)$", line)
        if not m or ("O" not in m.group(2) and "F" not in m.group(2)):
            continue
        name = m.group(5).split()[-1]
        out.setdefault(m.group(3), []).append((int(m.group(1), 16), int(m.group(4), 16), name))
    return out


def name_at(syms, section, offset):
    for start, size, name in syms.get(section, []):
        if start <= offset < start + max(size, 1):
            return name if offset == start else f"{name}+{offset - start}"
    return f"{section}+{offset}"


def section_bytes(objdump, obj, section):
    """The contents of a section as bytes (empty for .bss or a missing section)."""
    try:
        text = run(objdump, "-s", "-j", section, obj)
    except subprocess.CalledProcessError:
        return b""
    data = bytearray()
    for line in text.splitlines():
        m = re.match(r"^ ([0-9a-f]{4,}) ((?:[0-9a-f]{2,8} ?){1,4})", line)
        if m:
            data += bytes.fromhex(m.group(2).replace(" ", ""))
    return bytes(data)


def normalise(insn, section, syms, rename):
    """One instruction's text with its relocation or same-section call resolved to a name."""
    idx, raw, text, reloc = insn
    imm_m = IMM_RE.search(text)
    imm = int(imm_m.group(1), 0) if imm_m else 0
    if reloc:
        kind, target = reloc
        if target.startswith("."):
            # Against a section: the instruction's immediate says where in it.
            if kind == "R_BPF_64_32":  # a call: (imm + 1) instructions into the section
                target = name_at(syms, target, (imm + 1) * 8)
            else:
                target = name_at(syms, target, imm)
    elif PCREL_CALL_RE.match(text) and raw.split()[1] == "10":
        # A BPF-to-BPF call (src_reg 1) within the section, with no relocation: relative to
        # the next instruction.
        target = name_at(syms, section, (idx + imm + 1) * 8)
    else:
        return text
    target = rename.get(target, target)
    if imm_m:
        return text[: imm_m.start()] + "&" + target + (imm_m.group(2) or "")
    return f"{text} ; {target}"


def functions(objdump, obj, rename):
    """{function: [normalised instruction]} of every function of obj."""
    syms = symbols(objdump, obj)
    raw_funcs, section, cur = {}, None, None
    for line in run(objdump, "-d", "-r", obj).splitlines():
        m = SECTION_RE.match(line)
        if m:
            section = m.group(1)
            continue
        m = FUNC_RE.match(line)
        if m:
            cur = raw_funcs.setdefault(rename.get(m.group(2), m.group(2)), (section, []))[1]
            continue
        m = INSN_RE.match(line)
        if m and cur is not None:
            cur.append([int(m.group(1)), m.group(2), LABEL_RE.sub("", m.group(3)), None])
            continue
        m = RELOC_RE.match(line)
        if m and cur:
            cur[-1][3] = (m.group(2), m.group(3))
    funcs = {
        name: [normalise(i, sec, syms, rename) for i in insns]
        for name, (sec, insns) in raw_funcs.items()
    }
    return funcs, syms


def data_objects(objdump, obj, syms, rename):
    out = {}
    for section in DATA_SECTIONS:
        raw = section_bytes(objdump, obj, section)
        for start, size, name in syms.get(section, []):
            out[rename.get(name, name)] = (section, raw[start : start + size] if raw else size)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rename", action="append", default=[], metavar="OLD=NEW")
    ap.add_argument("--objdump", default="llvm-objdump-19")
    args = ap.parse_args()
    rename = dict(r.split("=", 1) for r in args.rename)

    old, old_syms = functions(args.objdump, args.old, rename)
    new, new_syms = functions(args.objdump, args.new, {})
    same = True
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a is None or b is None:
            print(f"{name}: only in {'new' if a is None else 'old'}")
            same = False
        elif a == b:
            print(f"{name}: same ({len(a)} instructions)")
        else:
            same = False
            print(f"{name}: DIFFERENT ({len(a)} -> {len(b)} instructions)")
            for line in difflib.unified_diff(a, b, "old", "new", n=3, lineterm=""):
                print("    " + line)
    old_data = data_objects(args.objdump, args.old, old_syms, rename)
    new_data = data_objects(args.objdump, args.new, new_syms, {})
    for name in sorted(set(old_data) | set(new_data)):
        if old_data.get(name) != new_data.get(name):
            same = False
            print(f"data {name}: {old_data.get(name)!r} -> {new_data.get(name)!r}")
    print("identical" if same else "differences above")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
