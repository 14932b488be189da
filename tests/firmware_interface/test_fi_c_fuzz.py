"""The reference C codec under AddressSanitizer and UndefinedBehaviorSanitizer: the fuzz harness
(firmware_interface/firmware/fuzz_codec.c) feeds it random bytes, random packets (every count over its whole
range) and mutated frames whose CRC is made right again, in exact-size heap buffers, for a bounded count.

Before the sanitizer run counts, a canary proves that the sanitizer build catches a one-byte overflow here (a
sanitizer that cannot run would make the fuzz run pass vacuously).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRMWARE = ROOT / "firmware_interface" / "firmware"
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
#: bounded: about 2 s with the sanitizers on the shared 2-core machine
ITERATIONS = 200_000
SEED = 20261123
#: error codes the fuzz run must have produced (enum mms_error; -8, the caller's buffer too small, is an
#: encoder result and not counted among the decoder's refusals)
DECODER_ERRORS = ("-1", "-2", "-3", "-4", "-5", "-6", "-7", "-9")
CANARY = """
#include <stdlib.h>
int main(int argc, char **argv) { (void)argv; char *b = malloc(4); b[argc + 3] = 1; free(b); return 0; }
"""


def _gcc() -> str:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the reference C codec"
    return gcc


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("c_fuzz")
    canary = work / "canary.c"
    canary.write_text(CANARY)
    subprocess.run([_gcc(), *SANITIZE, "-g", "-o", str(work / "canary"), str(canary)], check=True,
                   capture_output=True)
    caught = subprocess.run([str(work / "canary")], capture_output=True, text=True, timeout=60)
    assert caught.returncode != 0 and "AddressSanitizer: heap-buffer-overflow" in caught.stderr, caught.stderr
    exe = work / "fuzz_codec"
    subprocess.run([_gcc(), "-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-O1", *SANITIZE, "-o", str(exe),
                    str(FIRMWARE / "mms_proto.c"), str(FIRMWARE / "fuzz_codec.c")], check=True, capture_output=True)
    return exe


def test_fuzzing_the_c_codec_under_sanitizers_finds_nothing(fuzzer):
    result = subprocess.run([str(fuzzer), str(SEED), str(ITERATIONS)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stderr == "", result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["iterations"] == ITERATIONS
    # every path was exercised: frames accepted (and round-tripped), each refusal, encodes made and refused
    assert summary["accepted"] > 1000
    assert all(summary["rejected"][code] > 0 for code in DECODER_ERRORS), summary
    assert summary["encoded"] > 1000 and summary["refused"] > 1000
