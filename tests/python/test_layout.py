"""test_layout.py - the ctypes mirrors (flashattn/_lib.py) match include/flashattn.h: a probe
generated from the mirrors' own field lists is compiled against the header and prints each
struct's size and each field's offset, compared with ctypes'. A field added, removed, renamed,
retyped or moved in the header fails here (a compile error or a mismatch)."""
import ctypes
import os
import re
import shutil
import subprocess

from flashattn import _lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def probe_source():
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "flashattn.h"',
             '#include "flashattn_block_mask.h"',
             "int main(void) {"]
    for cname, struct in _lib.STRUCTS.items():
        lines.append('printf("%s %%zu\\n", sizeof(%s));' % (cname, cname))
        for field, _ in struct._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));'
                         % (cname, field, cname, field))
    return "\n".join(lines + ["return 0; }"])


def expected():
    out = {}
    for cname, struct in _lib.STRUCTS.items():
        out[cname] = ctypes.sizeof(struct)
        for field, _ in struct._fields_:
            out["%s.%s" % (cname, field)] = getattr(struct, field).offset
    return out


def test_struct_layouts_match_the_header(tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to check the struct layouts"
    src, exe = tmp_path / "probe.c", tmp_path / "probe"
    src.write_text(probe_source())
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o",
                    str(exe)], check=True, capture_output=True, text=True)
    got = dict(line.split() for line in subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True).stdout.splitlines())
    assert {k: int(v) for k, v in got.items()} == expected()


def test_every_field_of_fa_tensors_is_mirrored():
    header = open(os.path.join(ROOT, "include", "flashattn.h")).read()
    body = header[header.index("typedef struct fa_tensors {"):header.index("} fa_tensors;")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)  # comments out
    assert re.findall(r"\*\s*(\w+)", body) == list(_lib.TENSOR_NAMES)
