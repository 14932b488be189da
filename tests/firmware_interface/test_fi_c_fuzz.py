"""The reference C codec under AddressSanitizer and UndefinedBehaviorSanitizer: the fuzz harness
(firmware_interface/firmware/fuzz_codec.c) feeds it random bytes, random packets (every count over its whole
range) and mutated frames whose CRC is made right again, in exact-size heap buffers, for a bounded count.

Before the sanitizer run counts, a canary proves that the sanitizer build catches a one-byte overflow here (a
sanitizer that cannot run would make the fuzz run pass vacuously).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from firmware_interface.c_firmware import FIRMWARE, SANITIZE, compile_c

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


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("c_fuzz")
    canary = work / "canary.c"
    canary.write_text(CANARY)
    compile_c([canary], work / "canary", *SANITIZE, "-g")
    caught = subprocess.run([str(work / "canary")], capture_output=True, text=True, timeout=60)
    assert caught.returncode != 0 and "AddressSanitizer: heap-buffer-overflow" in caught.stderr, caught.stderr
    return compile_c([FIRMWARE / "mms_proto.c", FIRMWARE / "fuzz_codec.c"], work / "fuzz_codec", "-g", "-O1",
                     *SANITIZE)


def test_fuzzing_the_c_codec_under_sanitizers_finds_nothing(fuzzer):
    result = subprocess.run([str(fuzzer), str(SEED), str(ITERATIONS)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stderr == "", result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["iterations"] == ITERATIONS
    # every path was exercised: frames accepted (and round-tripped), each refusal, encodes made and refused
    assert summary["accepted"] > 1000
    assert all(summary["rejected"][code] > 0 for code in DECODER_ERRORS), summary
    assert summary["encoded"] > 1000 and summary["refused"] > 1000
