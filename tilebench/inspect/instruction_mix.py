"""A kernel's instruction mix: how many of its instructions are tensor-core, memory, arithmetic, control...

Counts are static: instructions written in the code (a loop body once), not instructions executed. They
come from SASS where the artifacts have it (nvdisasm or cuobjdump was installed), else from PTX, which
every CUDA kernel has (the cubin's embedded copy, or nvcc's). One table, ``PREFIXES``, names each class's
opcode prefixes: PTX's in lower case, SASS's in upper case. An opcode takes the class of its longest
prefix that ends at a modifier (``.`` or ``::``): ``cp.async.bulk.tensor.2d...`` is TMA, ``cp.async.ca``
cp.async, ``ld.shared::cta.u32`` shared memory. A SASS uniform-datapath twin (``UIADD3``, ``USHF``) that
the table does not name counts as its vector opcode. Generic loads and stores (``ld``/``st``/``LD``/``ST``,
no state space) and moves count as "other". The wgmma fences and waits (``WARPGROUP.*`` in SASS) count
with the tensor core they order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

TENSOR_CORE = "tensor core"
GLOBAL = "memory: global"
SHARED = "memory: shared"
TMA = "memory: TMA"
CP_ASYNC = "memory: cp.async"
LOCAL = "memory: local"
ARITHMETIC = "arithmetic"
CONTROL = "control (branch, barrier)"
CONVERSION = "conversion"
OTHER = "other"
CLASSES = (TENSOR_CORE, GLOBAL, SHARED, TMA, CP_ASYNC, LOCAL, ARITHMETIC, CONTROL, CONVERSION, OTHER)

# class -> its opcode prefixes (PTX lower case, SASS upper case); anything unnamed is OTHER
_TABLE = {
    TENSOR_CORE: "wgmma mma wmma tcgen05 HGMMA IGMMA QGMMA BGMMA HMMA IMMA DMMA BMMA WARPGROUP",
    GLOBAL: "ld.global ldu.global st.global atom.global red.global prefetch.global LDG STG ATOMG REDG RED",
    SHARED: "ld.shared st.shared atom.shared red.shared ldmatrix stmatrix st.async LDS STS LDSM STSM ATOMS",
    TMA: "cp.async.bulk cp.reduce.async.bulk prefetch.tensormap tensormap UTMALDG UTMASTG UTMAREDG UTMAPF "
    "UTMACCTL UTMACMDFLUSH UBLKCP UBLKRED UBLKPF",
    CP_ASYNC: "cp.async LDGSTS LDGDEPBAR",
    LOCAL: "ld.local st.local LDL STL",
    ARITHMETIC: "add sub mul mad fma div rem abs neg min max shl shr and or xor not lop3 setp selp set slct "
    "rcp sqrt rsqrt ex2 lg2 sin cos tanh popc clz bfe bfi bfind brev prmt shf dp4a dp2a copysign testp "
    "addc subc madc mul24 mad24 sad fns FADD FMUL FFMA FMNMX FSETP FSEL FSET FCHK MUFU HADD2 HMUL2 HFMA2 "
    "HMNMX2 HSETP2 HSET2 DADD DMUL DFMA DSETP IADD3 IADD IMAD IMUL IABS IMNMX ISETP LOP3 LOP SHF SHL SHR "
    "LEA POPC FLO BREV BMSK PRMT SEL PLOP3 PSETP VIADD VIMNMX IDP",
    CONTROL: "bra brx call ret exit trap bar barrier mbarrier fence membar elect griddepcontrol nanosleep "
    "BRA BRX JMP JMX CALL RET EXIT BAR BSYNC BSSY WARPSYNC SYNCS MEMBAR FENCE ERRBAR CCTL DEPBAR ELECT "
    "NANOSLEEP YIELD BPT KILL",
    CONVERSION: "cvt F2F F2I I2F I2I F2FP I2IP FRND",
}
PREFIXES: dict[str, str] = {prefix: cls for cls, names in _TABLE.items() for prefix in names.split()}

_BOUNDARY = re.compile(r"\.|::")
# PTX
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_DIRECTIVE = re.compile(r"^[ \t]*\.[^;\n]*;?", re.M)  # to its `;`, or its line's end (.loc, .file have none)
_STATEMENT_END = re.compile(r";|^[ \t]*[{}][ \t]*$", re.M)  # `;`, or a block brace alone on its line
_LEAD = re.compile(r"^(?:\s|[{}]|[$%\w]+:(?!:))*")  # braces and labels before an instruction
_GUARD = re.compile(r"^@!?%?\w+\s+")
# SASS: `/*0a30*/  @!P0 HGMMA.64x128x16.F32 ...` (nvdisasm and cuobjdump alike)
_SASS_LINE = re.compile(r"^\s*/\*[0-9a-fA-F]{4,}\*/\s*\{?\s*(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.\w+)*)")


@dataclass(frozen=True)
class InstructionMix:
    """Static instruction counts of one kernel, per class (``CLASSES``) and per opcode."""

    isa: str  # "SASS" or "PTX"
    counts: dict[str, int] = field(default_factory=dict)  # class -> instructions, every class present
    opcodes: dict[str, int] = field(default_factory=dict)  # full opcode -> instructions

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@cache
def classify(opcode: str) -> str:
    """The class of one opcode (``wgmma.mma_async.sync...`` -> "tensor core"), by its longest prefix."""
    ends = [match.start() for match in _BOUNDARY.finditer(opcode)]
    for end in [len(opcode), *reversed(ends)]:
        found = PREFIXES.get(opcode[:end])
        if found is not None:
            return found
    if opcode[:1] == "U" and opcode[1:2].isupper():  # a uniform-datapath twin: UIADD3 as IADD3
        return classify(opcode[1:])
    return OTHER


def ptx_opcodes(ptx: str) -> Iterator[str]:
    """Each instruction's opcode, in order (directives, labels, braces and predicate guards left out)."""
    for statement in _STATEMENT_END.split(_DIRECTIVE.sub("", _COMMENTS.sub("", ptx))):
        text = _GUARD.sub("", _LEAD.sub("", statement))
        if text[:1].isalpha():
            yield text.split(None, 1)[0]


def sass_opcodes(sass: str) -> Iterator[str]:
    """Each instruction's opcode in nvdisasm or cuobjdump output."""
    for line in sass.splitlines():
        found = _SASS_LINE.match(line)
        if found:
            yield found.group(1)


def mix(opcodes: Iterable[str], isa: str) -> InstructionMix:
    """Count opcodes by class."""
    per_opcode = Counter(opcodes)
    counts = dict.fromkeys(CLASSES, 0)
    for opcode, n in per_opcode.items():
        counts[classify(opcode)] += n
    return InstructionMix(isa, counts, dict(per_opcode.most_common()))


def ptx_mix(ptx: str) -> InstructionMix:
    return mix(ptx_opcodes(ptx), "PTX")


def sass_mix(sass: str) -> InstructionMix:
    return mix(sass_opcodes(sass), "SASS")


def instruction_mixes(*artifacts: Any) -> tuple[str, list[InstructionMix | None]]:
    """The mixes of several kernels' ``KernelArtifacts`` from one ISA: SASS when every one has it, else PTX
    (compiled with nvcc where missing: ``ensure_ptx``). Returns the ISA and a mix per kernel (None where
    that ISA could not be had: see the artifacts' ``errors``)."""
    if all(getattr(art, "sass", None) for art in artifacts):
        return "SASS", [sass_mix(art.sass) for art in artifacts]
    texts = [art.ensure_ptx() for art in artifacts]
    return "PTX", [ptx_mix(text) if text else None for text in texts]
