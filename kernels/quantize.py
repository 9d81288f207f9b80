"""Triton quantization pre-pass: the bytes and scales of `formats`, bit for bit, in one read of x.

Public functions mirror `formats` (same names, same outputs, same errors):
per-token fp8 (optionally also writing the fp8 bytes transposed, [..., D, S],
for Hopper's K-major FP8 wgmma operands), token-block fp8, MXFP8 and NVFP4.

Bit-exactness does not rely on the interpreter's float conversions (its fp8
cast truncates ties) nor on GPU division `/` (approximate): every scale uses
IEEE division (`tl.math.div_rn`), the fp8 quotients by a row's or block's
shared scale `_div_by_shared` (one IEEE division per row and a correction step
per element: div_rn's bits, proved in tests/test_quantize_division.py; NVFP4
keeps div_rn, see `_nvfp4_kernel`), amaxes are integer maxima over the fp32 bit
patterns (exact and NaN-propagating on every backend), and E4M3 codes come
from `_e4m3_code`: the GPU's nearest-even saturating conversion, integer
arithmetic under the interpreter (the same bytes). E2M1 and E8M0 codes are
built with integer arithmetic everywhere.
The fp8 outputs are written through uint8 views.

Fallback: when Triton cannot run on the tensor (not importable, or a CPU
tensor without TRITON_INTERPRET=1; see `_triton_env`), or a block size is not
a power of two, these functions return `formats`' results (identical bytes).
The jit helpers `_abs_bits`, `_fp8_row_codes`, `_e4m3_code`, `_e4m3_value`, `_e4m3_to_f32` and `_e2m1_code` are
shared with `attention_quant.py` (in-register quantization inside the
attention kernels): change their semantics only together with it.

Known limit: a GPU that flushes fp32 subnormals may differ on MX blocks whose
amax is itself below ~2^-117 (the test `test_quantize.py -m gpu` shows it).
"""
from __future__ import annotations

import torch

from . import formats as F
from ._triton_env import HAS_TRITON, INTERPRET, can_run_triton
from .buffers import carve
from .relaunch import Relaunch

if HAS_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def _abs_bits(x):
        """fp32 -> int32 bit pattern with the sign cleared (orders like |x|; NaN is largest)."""
        return x.to(tl.int32, bitcast=True) & 0x7FFFFFFF

    @triton.jit
    def _clamp_tiny(amax, TINY: tl.constexpr):
        """max(amax, TINY) that keeps NaN (hardware max would drop it)."""
        return tl.where(amax < TINY, TINY, amax)

    @triton.jit
    def _fp8_scale(amax_bits, TINY: tl.constexpr):
        """The fp8 scale of a row, block or tile from its amax as bits (`_abs_bits`): max(amax, TINY) / 448,
        an IEEE division (formats' rule)."""
        return tl.math.div_rn(_clamp_tiny(amax_bits.to(tl.float32, bitcast=True), TINY), 448.0)

    @triton.jit
    def _e4m3_bits(v):
        """fp32 -> E4M3 (fn) byte as int32: nearest-even, saturating at ±448, NaN -> 0x7F | sign."""
        bits = v.to(tl.int32, bitcast=True)
        sign = (bits >> 24) & 0x80
        a = bits & 0x7FFFFFFF
        # normal range [2^-6, 448]: drop 20 mantissa bits with round-half-even, rebias 127 -> 7
        normal = ((a + 0x7FFFF + ((a >> 20) & 1)) >> 20) - (120 << 3)
        # below 2^-6: count units of 2^-9, m * 2^(E - 150) / 2^-9 = m >> (141 - E), rounded half-even
        shift = tl.minimum(tl.maximum(141 - (a >> 23), 1), 30)
        m = (a & 0x7FFFFF) | 0x800000
        q = m >> shift
        rem = m & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        q += ((rem > half) | ((rem == half) & ((q & 1) == 1))).to(tl.int32)
        byte = tl.where(a < (121 << 23), q, normal)
        byte = tl.where(a > 0x43E00000, 0x7E, byte)  # above 448 (incl. Inf): saturate
        byte = tl.where(a > 0x7F800000, 0x7F, byte)  # NaN
        return byte | sign

    @triton.jit
    def _e4m3_to_f32(byte):
        """Non-negative E4M3 byte (int32) -> fp32, exact; 0x7F -> NaN."""
        exp = (byte >> 3) & 0xF
        man = byte & 7
        normal = (((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)
        val = tl.where(exp == 0, man.to(tl.float32) * 0.001953125, normal)
        return tl.where((byte & 0x7F) == 0x7F, float("nan"), val)

    @triton.jit
    def _e4m3_signed(byte):
        """E4M3 byte (int32) -> fp32 with its sign, -0 included (Triton's unary minus gives +0)."""
        mag = _e4m3_to_f32(byte & 0x7F).to(tl.int32, bitcast=True)
        return (mag | ((byte & 0x80) << 24)).to(tl.float32, bitcast=True)

    # On the GPU the E4M3 conversions run on the hardware (sm_89+: cvt.rn.satfinite, two values per
    # instruction, nearest-even, ±448 beyond range and for ±Inf; decoding is exact), which gives
    # `_e4m3_bits`' bytes for every non-NaN input at a fraction of the integer emulation's cost (the
    # pre-pass was compute-bound on it: 0.48 ms for K at S = 8k, B×H = 64, D = 128). The interpreter's
    # fp8 cast truncates ties, so it keeps the integer path.
    _HW_FP8 = tl.constexpr(not INTERPRET)

    @triton.jit
    def _e4m3_code(v):
        """fp32 -> E4M3 byte as int32, the bytes of `_e4m3_bits` (NaN -> 0x7F | sign as there: the
        hardware's NaN carries no sign)."""
        if _HW_FP8:
            byte = v.to(tl.float8e4nv).to(tl.uint8, bitcast=True).to(tl.int32)
            sign = (v.to(tl.int32, bitcast=True) >> 24) & 0x80
            return tl.where(v != v, 0x7F | sign, byte)
        else:
            return _e4m3_bits(v)

    # The NaN fix above costs ~5 of the key-side pass's instructions per element and matters only where
    # a quotient is NaN, which needs a NaN or ±Inf in the row or tile whose scale divides it: a finite
    # amax (the common case) rules it out. Its test is one scalar per program, so the branch is uniform.
    _INF_BITS = tl.constexpr(0x7F800000)

    @triton.jit
    def _store_e4m3(Ptr, offs, mask, v, no_nan, TRANSPOSED: tl.constexpr):
        """Store the E4M3 bytes of v [R, C] (`_e4m3_code`'s) at Ptr + offs (TRANSPOSED: offs and mask
        [C, R]) and return their values (fp32, signed). no_nan: a per-program scalar, True only when no
        element of v is NaN; then the hardware's bytes are already right and the NaN fix is skipped.
        The stores sit inside the branch: joining the two branches' bytes would unpack the hardware's
        byte pairs into a register each (~4 more instructions per element on sm_90)."""
        if _HW_FP8 and no_nan:
            f8 = v.to(tl.float8e4nv)
            _store_bytes(Ptr, offs, mask, f8.to(tl.uint8, bitcast=True), TRANSPOSED)
            value = f8.to(tl.float32)
        else:
            code = _e4m3_code(v)
            _store_bytes(Ptr, offs, mask, code.to(tl.uint8), TRANSPOSED)
            value = _e4m3_value(code)
        return value

    @triton.jit
    def _store_bytes(Ptr, offs, mask, byte, TRANSPOSED: tl.constexpr):
        if TRANSPOSED:
            tl.store(Ptr + offs, tl.trans(byte), mask=mask)
        else:
            tl.store(Ptr + offs, byte, mask=mask)

    @triton.jit
    def _e4m3_pairs(v):
        """fp32 [..., 2] -> int16 [...]: the E4M3 bytes of v[..., 0] (low byte) and v[..., 1] (high byte),
        the hardware's (no NaN fix). One cvt per pair, with Triton's own f32 -> float8e4nv instruction
        and operand order (`Fp32_to_Fp8E4M3Nv`: "$0, $2, $1", element 0 in the low byte), so the bytes
        are `.to(tl.float8e4nv)`'s; the cast itself would hand them over as two int8 that the packing
        unpacks and joins again (the Vᵀ key-side pass: 968 against 912 SASS instructions per program at
        16 warps on the finite path)."""
        lo, hi = tl.split(v)
        return tl.inline_asm_elementwise("cvt.rn.satfinite.e4m3x2.f32 $0, $2, $1;", "=h,r,r", [lo, hi],
                                         dtype=tl.int16, is_pure=True, pack=1)

    @triton.jit
    def _store_e4m3_pairs(Ptr, mask, v, no_nan):
        """`_store_e4m3` for token pairs: v [R, C, 2, 2 (token)] -> E4M3 bytes stored two tokens to an
        int16 (the first token's byte low: little-endian, it lies first) at Ptr [2, C, R] (int16
        pointers, v's axes reversed); returns their values (fp32, signed)."""
        if _HW_FP8 and no_nan:
            tl.store(Ptr, tl.permute(_e4m3_pairs(v), (2, 1, 0)), mask=mask)
            value = v.to(tl.float8e4nv).to(tl.float32)  # ptxas reuses the conversion of `_e4m3_pairs`
        else:
            code = _e4m3_code(v)
            lo, hi = tl.split(code)
            tl.store(Ptr, tl.permute(((lo & 0xFF) | (hi << 8)).to(tl.int16), (2, 1, 0)), mask=mask)
            value = _e4m3_value(code)
        return value

    @triton.jit
    def _e4m3_value(byte):
        """E4M3 byte (int32) -> fp32 with its sign, exactly (`_e4m3_signed`)."""
        if _HW_FP8:
            return byte.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)
        else:
            return _e4m3_signed(byte)

    @triton.jit
    def _e4m3_row_l1(byte):
        """Σ over each row of |E4M3 value| of [rows, D] bytes (int32), unscaled: ρ's ‖dO8_i‖₁ (`dq_row_scale`), one
        definition for dO's pass, which writes it, and ρ's kernel, which computes it where it is not given."""
        return tl.sum(tl.abs(_e4m3_value(byte)), axis=1)

    @triton.jit
    def _e2m1_code(v, u, STOCHASTIC: tl.constexpr):
        """fp32 -> 4-bit E2M1 code (int32), as formats.e2m1_codes: lo grid point + round-up bit."""
        a = tl.abs(v)
        lo = ((a >= 0.5).to(tl.int32) + (a >= 1.0).to(tl.int32) + (a >= 1.5).to(tl.int32)
              + (a >= 2.0).to(tl.int32) + (a >= 3.0).to(tl.int32) + (a >= 4.0).to(tl.int32)
              + (a >= 6.0).to(tl.int32))
        lo_val = tl.where(lo < 4, lo.to(tl.float32) * 0.5,
                          tl.where(lo == 4, 2.0, tl.where(lo == 5, 3.0, tl.where(lo == 6, 4.0, 6.0))))
        step = tl.where(lo < 4, 0.5, tl.where(lo < 6, 1.0, 2.0))
        rest = a - lo_val  # exact: lo <= a <= 2 lo
        if STOCHASTIC:
            up = u * step < rest
        else:
            up = (rest > step * 0.5) | ((rest == step * 0.5) & ((lo & 1) == 1))
        code = lo + (up & (lo < 7)).to(tl.int32)
        return code | tl.where(v < 0, 8, 0)

    # Division by a row's or a tile's shared scale: one IEEE division per row, rcp = RN(1/scale), and per
    # element Markstein's correction step, q0 = RN(x·rcp), rem = RN(q0·scale - x) (exact), q = RN(q0 -
    # rem·rcp): one FMUL and two FFMAs where `div_rn` was ~15 instructions and a call to its slow path,
    # and two `div_rn` per element were a third of the key-side pass's instructions on sm_90.
    # tests/test_quantize_division.py proves q = RN(x/scale) for every quotient of 2^-11 or more (all
    # 2^23 scale mantissas) and the same E4M3 byte below, underflow and ±0 included. It needs fused
    # multiply-adds, which the interpreter does not have (its `tl.fma` rounds twice), so the
    # interpreter keeps `div_rn`.
    _FUSED_FMA = tl.constexpr(not INTERPRET)

    @triton.jit
    def _div_by_shared(x, scale):
        """x / scale for a scale shared by a row (scale [R, 1] against x [R, C]) or a tile (a scalar),
        scale = max(amax, TINY) / 448 with |x| <= amax: the fp32 bits of tl.math.div_rn(x, scale)
        where the quotient is 2^-11 or more, its sign and E4M3 byte (a zero) below. With amax = ±Inf
        or NaN the quotients are IEEE's x / Inf (±0, NaN for ±Inf) or NaN, as div_rn's."""
        if _FUSED_FMA:
            rcp = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)  # once per row
            # the remainder's product must stay finite for scale = Inf (rcp = 0): x / Inf = ±0
            rem_scale = tl.where(rcp == 0.0, 0.0, scale)
            q0 = x * rcp
            # The negated remainder q0·scale - x keeps -0: x = -0 gives q0 = -0, rem = +0 and
            # -0 - 0·rcp = -0, where x - q0·scale would give +0 and +0 + (-0) = +0. `* -1.0` is an exact
            # negation (Triton's unary minus is 0 - x) the compiler folds into the FMAs' operands.
            rem = tl.fma(q0, rem_scale, x * -1.0)
            return tl.fma(rem, rcp * -1.0, q0)
        else:
            return tl.math.div_rn(x, tl.broadcast_to(scale, x.shape))

    @triton.jit
    def _fp8_row_codes(x, R: tl.constexpr, C: tl.constexpr, TINY: tl.constexpr):
        """Per-row fp8 of an fp32 [R, C] tile, as formats.quantize_fp8_per_token: (E4M3 codes int32
        [R, C], scale [R]). The amax is an integer max over the bit patterns and the clamp keeps NaN."""
        amax = tl.max(_abs_bits(x), axis=1).to(tl.float32, bitcast=True)
        scale = tl.math.div_rn(_clamp_tiny(amax, TINY), tl.full((R,), 448.0, tl.float32))
        return _e4m3_code(_div_by_shared(x, scale[:, None])), scale

    @triton.jit
    def _store_transposed(X8T, byte, mask, bh, offs_s, offs_d, S, D):
        """A [BLOCK_S, BLOCK_D] tile of one slice's bytes into its [D, S] copy (the K-major operand)."""
        offs_t = bh * S * D + offs_d[:, None] * S + offs_s[None, :]
        tl.store(X8T + offs_t, tl.trans(byte), mask=tl.trans(mask))

    @triton.jit
    def _fp8_tokens_kernel(
        X, X8, X8T, Scale, S, D: tl.constexpr,
        TINY: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
        PER_BLOCK: tl.constexpr, WRITE_T: tl.constexpr,
    ):
        """One program: BLOCK_S tokens × D of one [S, D] slice; a scale per token or per tile."""
        bh = tl.program_id(0).to(tl.int64)  # slices on axis 0: its grid limit is 2^31 - 1
        pid_s = tl.program_id(1)
        offs_s = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
        offs_d = tl.arange(0, BLOCK_D)
        mask = (offs_s[:, None] < S) & (offs_d[None, :] < D)
        offs = bh * S * D + offs_s[:, None] * D + offs_d[None, :]  # (BLOCK_S, BLOCK_D)
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        if PER_BLOCK:
            amax = tl.max(tl.max(_abs_bits(x), axis=1), axis=0).to(tl.float32, bitcast=True)
            scale = tl.math.div_rn(_clamp_tiny(amax, TINY), 448.0)
            tl.store(Scale + bh * tl.cdiv(S, BLOCK_S) + pid_s, scale)
            code = _e4m3_code(_div_by_shared(x, scale))
        else:
            code, scale = _fp8_row_codes(x, BLOCK_S, BLOCK_D, TINY)
            tl.store(Scale + bh * S + offs_s, scale, mask=offs_s < S)
        byte = code.to(tl.uint8)
        tl.store(X8 + offs, byte, mask=mask)
        if WRITE_T:  # the same bytes, [D, S]: K-major operand for the token-contracting products
            _store_transposed(X8T, byte, mask, bh, offs_s, offs_d, S, D)

    @triton.jit
    def _fp8_requant_blocks_kernel(
        X8, Scale, Y8, BScale, S, D: tl.constexpr,
        TINY: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, TRANSPOSED: tl.constexpr,
    ):
        """One program: one token block of one slice; per-token fp8 bytes -> token-block fp8 bytes.
        TRANSPOSED: bytes in and out are [D, S] (the K-major copy) instead of [S, D]."""
        bh = tl.program_id(0).to(tl.int64)
        pid_s = tl.program_id(1)
        offs_s = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
        offs_d = tl.arange(0, BLOCK_D)
        mask = offs_d[None, :] < D
        if TRANSPOSED:
            offs = bh * S * D + offs_d[None, :] * S + offs_s[:, None]
        else:
            offs = bh * S * D + offs_s[:, None] * D + offs_d[None, :]
        byte = tl.load(X8 + offs, mask=mask, other=0).to(tl.int32)
        x = _e4m3_value(byte) * tl.load(Scale + bh * S + offs_s)[:, None]
        amax = tl.max(tl.max(_abs_bits(x), axis=1), axis=0).to(tl.float32, bitcast=True)
        scale = tl.math.div_rn(_clamp_tiny(amax, TINY), 448.0)
        tl.store(BScale + bh * (S // BLOCK_S) + pid_s, scale)
        out = _e4m3_code(_div_by_shared(x, scale)).to(tl.uint8)
        tl.store(Y8 + offs, out, mask=mask)

    @triton.jit
    def _key_side_token_pairs(
        X, X8, Scale, XB8, BScale, S, D, bh, pid_s,
        TINY: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, P_ORDER: tl.constexpr = False,
    ):
        """`_fp8_key_side_kernel`'s TRANSPOSED program (Vᵀ: both byte tiles [D, S]) with the same bytes
        and scales, transposed two tokens at a time. Each E4M3 pair of consecutive tokens at one d is one
        int16 (`_e4m3_pairs`), so the transposition through shared memory moves 16-bit words (stmatrix
        .trans on sm_90) instead of bytes one by one (`tl.trans` of the uint8 tile: an LDS.U8 per byte,
        then PRMTs to pack them). The tile is read as [S/2, D/2, 2 (d half), 2 (token)]: the token pair
        and the d halves joined in-thread, so each thread holds two tokens × 16 d as the K program does
        (two tokens' scale divisions per thread; the token pairs alone, [S/2, D, 2], gave it four).
        sm_90 SASS per program (128 × 128, scripts/compile_prepass.py's options), byte-by-byte -> pairs:
        16 warps 1944 -> 1456 (K 1400), 8 warps 3552 -> 2496 (K 2512); the finite path alone, 16 warps
        1144 -> 912 (K 848). P_ORDER: the token-block copy's keys in `p_register_order` (each 32-key chunk's token
        pairs as the fp8 P·V operand's registers hold P), the per-token bytes in key order."""
        HALF: tl.constexpr = BLOCK_D // 2
        rows = pid_s * BLOCK_S + 2 * tl.arange(0, BLOCK_S // 2)  # the first token of each pair
        dl = tl.arange(0, HALF)
        src = X + bh * S * D + rows[:, None] * D + dl[None, :]
        m_lo, m_hi = dl[None, :] < D, dl[None, :] + HALF < D
        x = tl.join(
            tl.join(tl.load(src, mask=m_lo, other=0.0), tl.load(src + HALF, mask=m_hi, other=0.0)),
            tl.join(tl.load(src + D, mask=m_lo, other=0.0), tl.load(src + D + HALF, mask=m_hi, other=0.0)),
        ).to(tl.float32)  # [S/2, D/2, 2 (d half), 2 (token)]
        amax_bits = tl.max(tl.max(_abs_bits(x), axis=2), axis=1)  # (S/2, 2): per token
        scale = _fp8_scale(amax_bits, TINY)
        tl.store(Scale + bh * S + rows[:, None] + tl.arange(0, 2)[None, :], scale)
        scale = scale[:, None, None, :]
        # outputs as int16 [2 (d half), D/2, S/2]: bytes d * S + token, token pairs 2-byte aligned (S even)
        d = tl.arange(0, 2)[:, None, None] * HALF + dl[None, :, None]
        offs, out_mask = bh * S * D + d * S + pid_s * BLOCK_S, d < D
        pairs = tl.arange(0, BLOCK_S // 2)[None, None, :]
        row_finite = tl.max(tl.max(amax_bits, axis=1), axis=0) < _INF_BITS  # then no quotient x / scale is NaN
        xt = _store_e4m3_pairs((X8 + offs).to(tl.pointer_type(tl.int16)) + pairs, out_mask,
                               _div_by_shared(x, scale), row_finite)
        xt = xt * scale  # the per-token values, exactly
        bamax_bits = tl.max(tl.max(tl.max(tl.max(_abs_bits(xt), axis=3), axis=2), axis=1), axis=0)
        bscale = _fp8_scale(bamax_bits, TINY)
        tl.store(BScale + bh * (S // BLOCK_S) + pid_s, bscale)
        xb = _div_by_shared(xt, bscale)
        if P_ORDER:  # pair 8h + 4e + q of each 16-pair chunk to place 8h + 2q + e (`p_register_order`), in registers
            # so that the stores are key order's (with the store indices permuted instead the pass took 626 against
            # 196 µs at 8k on an H100, session 33)
            xb = tl.reshape(tl.permute(tl.reshape(xb, [BLOCK_S // 32, 2, 2, 4, HALF, 2, 2]), [0, 1, 3, 2, 4, 5, 6]),
                            [BLOCK_S // 2, HALF, 2, 2])
        _store_e4m3_pairs((XB8 + offs).to(tl.pointer_type(tl.int16)) + pairs, out_mask, xb, bamax_bits < _INF_BITS)

    @triton.jit
    def _key_side_program(
        X, X8, Scale, XB8, BScale, S, D, bh, pid_s,
        TINY: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, TRANSPOSED: tl.constexpr,
        P_ORDER: tl.constexpr = False,
    ):
        """One token block of one slice, read once: the per-token fp8 bytes and scales and the token-block
        copy re-quantized from them (TRANSPOSED: both as [D, S]; P_ORDER, with TRANSPOSED and BLOCK_S a multiple
        of 32 only, checked by the caller: the copy in `p_register_order`)."""
        if TRANSPOSED and BLOCK_S >= 2 and BLOCK_D >= 2:  # Vᵀ two tokens at a time; else byte by byte
            _key_side_token_pairs(X, X8, Scale, XB8, BScale, S, D, bh, pid_s, TINY, BLOCK_S, BLOCK_D, P_ORDER)
        else:
            # the block's base as one scalar offset, the tile's in int32 (< BLOCK_S·D): 64-bit offsets per element
            # took the K program to 128 registers and 536 B of spills at 16 warps (sm_90)
            base = bh * S * D + pid_s * BLOCK_S * D
            rows = tl.arange(0, BLOCK_S)
            offs_s = pid_s * BLOCK_S + rows
            offs_d = tl.arange(0, BLOCK_D)
            mask = offs_d[None, :] < D
            x = tl.load(X + base + (rows[:, None] * D + offs_d[None, :]), mask=mask, other=0.0).to(tl.float32)
            amax_bits = tl.max(_abs_bits(x), axis=1)  # (BLOCK_S,)
            scale = _fp8_scale(amax_bits, TINY)
            tl.store(Scale + bh * S + offs_s, scale)
            if TRANSPOSED:
                offs, out_mask = bh * S * D + offs_d[:, None] * S + offs_s[None, :], offs_d[:, None] < D
            else:
                offs, out_mask = base + (rows[:, None] * D + offs_d[None, :]), mask
            row_finite = tl.max(amax_bits, axis=0) < _INF_BITS  # then no quotient x / scale is NaN
            xt = _store_e4m3(X8, offs, out_mask, _div_by_shared(x, scale[:, None]), row_finite, TRANSPOSED)
            xt = xt * scale[:, None]  # the per-token values, exactly
            bamax_bits = tl.max(tl.max(_abs_bits(xt), axis=1), axis=0)
            bscale = _fp8_scale(bamax_bits, TINY)
            tl.store(BScale + bh * (S // BLOCK_S) + pid_s, bscale)
            _store_e4m3(XB8, offs, out_mask, _div_by_shared(xt, bscale), bamax_bits < _INF_BITS, TRANSPOSED)

    @triton.jit
    def _fp8_key_side_kernel(
        X, X8, Scale, XB8, BScale, S, D: tl.constexpr,
        TINY: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, TRANSPOSED: tl.constexpr,
    ):
        """One program: one token block of one slice (`_key_side_program`)."""
        _key_side_program(X, X8, Scale, XB8, BScale, S, D, tl.program_id(0).to(tl.int64), tl.program_id(1), TINY,
                          BLOCK_S, BLOCK_D, TRANSPOSED)

    @triton.jit
    def _fp8_key_sides_kernel(
        K, K8, KScale, KB8, KBScale, V, V8, VScale, VB8, VBScale, S, D: tl.constexpr,
        TINY: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, P_ORDER: tl.constexpr = False,
        LAUNCH_DEPENDENTS: tl.constexpr = False,
    ):
        """K's pass (rows) and V's (Vᵀ) in one launch: even programs of axis 0 take K's block of slice
        axis0 // 2, odd ones V's, so the two run side by side and share one tail. P_ORDER: V's token-block copy
        in `p_register_order`. LAUNCH_DEPENDENTS: each program lets the kernel after it start
        (`griddepcontrol.launch_dependents`, a no-op unless that kernel is a programmatic dependent launch: the
        attention forward's, which waits for this pass's writes before it reads them)."""
        if LAUNCH_DEPENDENTS:
            tl.inline_asm_elementwise("griddepcontrol.launch_dependents; // dummy $0", "=r", [], dtype=tl.int32,
                                      is_pure=False, pack=1)
        pid = tl.program_id(0)
        bh = (pid // 2).to(tl.int64)
        if pid % 2 == 0:
            _key_side_program(K, K8, KScale, KB8, KBScale, S, D, bh, tl.program_id(1), TINY, BLOCK_S, BLOCK_D,
                              False)
        else:
            _key_side_program(V, V8, VScale, VB8, VBScale, S, D, bh, tl.program_id(1), TINY, BLOCK_S, BLOCK_D,
                              True, P_ORDER)

    @triton.jit
    def _fp8_tokens_delta_kernel(
        X, X8, X8T, Scale, O8, OScale, Delta, L1, S, D: tl.constexpr,
        TINY: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, WRITE_T: tl.constexpr = False,
        WRITE_L1: tl.constexpr = False,
    ):
        """One program: BLOCK_S tokens of dO; per-token fp8 bytes and scales of dO, and the backward's
        delta = rowsum(deq(dO) ∘ deq(O)) from the saved per-token fp8 O, in one read of each. WRITE_T: the
        bytes also as [D, S] (the dV product's K-major B operand). WRITE_L1: each token's Σ_d |E4M3 value| of its
        bytes (unscaled), which the FP8 dQ product's ρ needs (`dq_row_scale`), from the bytes in hand."""
        bh = tl.program_id(0).to(tl.int64)
        offs_s = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
        offs_d = tl.arange(0, BLOCK_D)
        mask = (offs_s[:, None] < S) & (offs_d[None, :] < D)
        offs = bh * S * D + offs_s[:, None] * D + offs_d[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        byte, scale = _fp8_row_codes(x, BLOCK_S, BLOCK_D, TINY)
        tl.store(Scale + bh * S + offs_s, scale, mask=offs_s < S)
        tl.store(X8 + offs, byte.to(tl.uint8), mask=mask)
        if WRITE_L1:
            tl.store(L1 + bh * S + offs_s, _e4m3_row_l1(byte), mask=offs_s < S)
        if WRITE_T:
            _store_transposed(X8T, byte.to(tl.uint8), mask, bh, offs_s, offs_d, S, D)
        o_byte = tl.load(O8 + offs, mask=mask, other=0).to(tl.int32)
        o_scale = tl.load(OScale + bh * S + offs_s, mask=offs_s < S, other=0.0)
        prod = (_e4m3_value(byte) * scale[:, None]) * (_e4m3_value(o_byte) * o_scale[:, None])
        tl.store(Delta + bh * S + offs_s, tl.sum(prod, axis=1), mask=offs_s < S)

    @triton.jit
    def _mxfp8_kernel(
        X, X8, Codes, R, NB,
        BLOCK_R: tl.constexpr, NB_P2: tl.constexpr, BLK: tl.constexpr,
    ):
        """One program: BLOCK_R rows × NB blocks of BLK elements; E8M0 exponent rounded up."""
        rows = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
        nb = tl.arange(0, NB_P2)
        j = tl.arange(0, BLK)
        mask2 = (rows[:, None] < R) & (nb[None, :] < NB)  # (BLOCK_R, NB_P2)
        mask = mask2[:, :, None]
        offs = rows[:, None, None] * (NB * BLK) + nb[None, :, None] * BLK + j[None, None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        amax_bits = tl.max(_abs_bits(x), axis=2)  # (BLOCK_R, NB_P2)
        biased = amax_bits >> 23
        e = biased - (127 + 8) + ((amax_bits & 0x7FFFFF) > 0x600000).to(tl.int32)
        e = tl.minimum(tl.maximum(tl.where(biased == 0, -127, e), -127), 127)
        code = tl.where(biased == 0xFF, 255, e + 127)
        # 2^-e from bits (exact); e = 127 would need the one subnormal power, 2^-127
        inv = tl.where(e == 127, 0x400000, (127 - e) << 23).to(tl.float32, bitcast=True)
        inv = tl.where(code == 255, float("nan"), inv)
        v = x * inv[:, :, None]  # a power of two: exact
        tl.store(X8 + offs, _e4m3_code(v).to(tl.uint8), mask=mask)
        tl.store(Codes + rows[:, None] * NB + nb[None, :], code.to(tl.uint8), mask=mask2)

    @triton.jit
    def _nvfp4_kernel(
        X, Noise, Glob, Codes, BScale, R, NB,
        TINY: tl.constexpr, BLOCK_R: tl.constexpr, NB_P2: tl.constexpr, HALF: tl.constexpr,
        GLOBAL_PER_ROW: tl.constexpr, STOCHASTIC: tl.constexpr,
    ):
        """One program: BLOCK_R rows × NB blocks of 2*HALF elements, split into even/odd halves
        so that the two codes of a byte come out of one tile position."""
        rows = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
        nb = tl.arange(0, NB_P2)
        j = tl.arange(0, HALF)
        mask2 = (rows[:, None] < R) & (nb[None, :] < NB)  # (BLOCK_R, NB_P2)
        mask = mask2[:, :, None]
        block_start = rows[:, None, None] * (NB * 2 * HALF) + nb[None, :, None] * (2 * HALF)
        offs_even = block_start + 2 * j[None, None, :]
        x_even = tl.load(X + offs_even, mask=mask, other=0.0).to(tl.float32)
        x_odd = tl.load(X + offs_even + 1, mask=mask, other=0.0).to(tl.float32)
        amax_bits = tl.maximum(tl.max(_abs_bits(x_even), axis=2), tl.max(_abs_bits(x_odd), axis=2))
        if GLOBAL_PER_ROW:  # the causally safe global scale: this token's amax
            row_amax = tl.max(amax_bits, axis=1).to(tl.float32, bitcast=True)
            glob = tl.math.div_rn(_clamp_tiny(row_amax, TINY), tl.full((BLOCK_R,), 2688.0, tl.float32))
            tl.store(Glob + rows, glob, mask=rows < R)
        else:
            glob = tl.load(Glob + rows, mask=rows < R, other=1.0)
        glob2 = tl.broadcast_to(glob[:, None], (BLOCK_R, NB_P2))
        bs = tl.math.div_rn(tl.math.div_rn(amax_bits.to(tl.float32, bitcast=True),
                                           tl.full((BLOCK_R, NB_P2), 6.0, tl.float32)), glob2)
        bs = tl.where(amax_bits >= 0x7F800000, float("nan"), bs)  # Inf/NaN in the block: NaN scale
        bs_byte = _e4m3_code(bs)
        denom = _e4m3_to_f32(bs_byte) * glob2
        zero = denom[:, :, None] == 0  # zero block scale: zero elements (and no 0/0)
        denom3 = tl.broadcast_to(tl.where(zero, 1.0, denom[:, :, None]), (BLOCK_R, NB_P2, HALF))
        # div_rn, not `_div_by_shared`: the E2M1 sign bit is set for v < 0, so a quotient that underflows
        # to -0 (code 0) and one that stays a negative subnormal (code 8) differ, below where the shared
        # division is proved; and a caller's global scale can make denom subnormal or huge.
        v_even = tl.where(zero, 0.0, tl.math.div_rn(x_even, denom3))
        v_odd = tl.where(zero, 0.0, tl.math.div_rn(x_odd, denom3))
        u_even = 0.0
        u_odd = 0.0
        if STOCHASTIC:
            u_even = tl.load(Noise + offs_even, mask=mask, other=0.0)
            u_odd = tl.load(Noise + offs_even + 1, mask=mask, other=0.0)
        packed = _e2m1_code(v_even, u_even, STOCHASTIC) | (_e2m1_code(v_odd, u_odd, STOCHASTIC) << 4)
        offs_codes = rows[:, None, None] * (NB * HALF) + nb[None, :, None] * HALF + j[None, None, :]
        tl.store(Codes + offs_codes, packed.to(tl.uint8), mask=mask)
        tl.store(BScale + rows[:, None] * NB + nb[None, :], bs_byte.to(tl.uint8), mask=mask2)


def _rows_per_program(row_elems: int) -> int:
    """Rows in one program's tile: big tiles under the interpreter (per-program overhead
    dominates there), ~4K elements on the GPU (a memory-bound pass; keeps registers low)."""
    target = 16384 if INTERPRET else 4096
    return max(1, min(256, triton.next_power_of_2(max(1, target // row_elems))))


def _num_warps(tile_elems: int) -> int:
    """Enough threads that a tile holds <= ~32 fp32 values per thread (token blocks can be 128 × 256)."""
    return max(4, min(16, triton.next_power_of_2(tile_elems // 1024)))


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _fp8_tokens(x: torch.Tensor, block: int | None, transposed: bool, launch: dict | None = None):
    """Launch the fp8 kernel on x [..., S, D]; block None = per token, else per token block.
    launch (benchmark sweeps, `_check_launch`): "num_warps", and "rows" (tokens per program, per-token only)."""
    launch = _check_launch(launch, ("num_warps", "rows") if block is None else ("num_warps",))
    x = x.contiguous()
    seq, dim = x.shape[-2], x.shape[-1]
    bh = x.numel() // max(1, seq * dim)
    x8 = torch.empty(x.shape, dtype=F.FP8_DTYPE, device=x.device)
    x8t = torch.empty((*x.shape[:-2], dim, seq), dtype=F.FP8_DTYPE, device=x.device) if transposed else x8
    block_d = triton.next_power_of_2(dim)
    if block is None:
        scale = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
        block_s = launch.get("rows") or min(_rows_per_program(block_d), triton.next_power_of_2(seq))
    else:
        scale = torch.empty((*x.shape[:-2], seq // block, 1, 1), dtype=torch.float32, device=x.device)
        block_s = block
    if x.numel():
        grid = (bh, triton.cdiv(seq, block_s))
        _fp8_tokens_kernel[grid](
            x, x8.view(torch.uint8), x8t.view(torch.uint8), scale, seq,
            # D a constexpr, as the key-side pass's: the d mask folds away at D = BLOCK_D, so loads and stores
            # are vectors along d (only the token mask stays)
            D=dim, TINY=F.FP8_TINY, BLOCK_S=block_s, BLOCK_D=block_d,
            PER_BLOCK=block is not None, WRITE_T=transposed,
            num_warps=launch.get("num_warps") or _num_warps(block_s * block_d),
        )
    return (x8, scale, x8t) if transposed else (x8, scale)


def _check_launch(launch: dict | None, allowed: tuple[str, ...]) -> dict:
    """A pre-pass launch override (scripts/bench_prepass.py sweeps them; defaults when None): only
    `allowed` keys, powers of two. The bytes do not depend on it: each program's rows are independent."""
    launch = dict(launch or {})
    for key, value in launch.items():
        if key not in allowed:
            raise ValueError(f"pre-pass launch key {key!r}: allowed {', '.join(allowed)}")
        if not (isinstance(value, int) and _is_pow2(value)):
            raise ValueError(f"pre-pass launch {key}={value!r}: a power of two")
    return launch


def _fallback_transposed(x8: torch.Tensor, scale: torch.Tensor, transposed: bool):
    return (x8, scale, x8.transpose(-1, -2).contiguous()) if transposed else (x8, scale)


def quantize_fp8_per_token(x: torch.Tensor, transposed: bool = False, launch: dict | None = None):
    """Per-token fp8 of x [..., S, D] (bf16/fp16/fp32), as `formats.quantize_fp8_per_token`.

    Returns (x8 [..., S, D] float8_e4m3fn, scale [..., S, 1] fp32), plus with
    `transposed` x8_t [..., D, S] contiguous: the same bytes, K-major. launch: benchmark
    overrides {"num_warps", "rows"} (the same bytes).
    """
    if transposed and x.dim() < 2:
        raise ValueError(f"a transposed copy needs x of shape [..., S, D], got {tuple(x.shape)}")
    if x.dim() < 2 or not can_run_triton(x):
        return _fallback_transposed(*F.quantize_fp8_per_token(x), transposed)
    return _fp8_tokens(x, None, transposed, launch)


def quantize_fp8_token_blocks(x: torch.Tensor, block: int, transposed: bool = False):
    """Token-block fp8 of x [..., S, D], as `formats.quantize_fp8_token_blocks`.

    Returns (x8 [..., S, D], scale [..., S // block, 1, 1] fp32), plus with
    `transposed` x8_t [..., D, S]. ValueError if S % block; a block that is not
    a power of two runs on the `formats` fallback.
    """
    F._token_block_view(x, block)  # same shape checks and errors as the ground truth
    if not (can_run_triton(x) and _is_pow2(block)):
        return _fallback_transposed(*F.quantize_fp8_token_blocks(x, block), transposed)
    return _fp8_tokens(x, block, transposed)


def quantize_mxfp8(x: torch.Tensor, block: int = F.MX_BLOCK):
    """MXFP8 of x [..., N] along the last dim, as `formats.quantize_mxfp8`.

    Returns (x8 [..., N] float8_e4m3fn, scale_e8m0 [..., N // block] uint8).
    """
    F._check_last_dim(x, block, "mxfp8")
    if not (can_run_triton(x) and _is_pow2(block)):
        return F.quantize_mxfp8(x, block)
    x = x.contiguous()
    nb = x.shape[-1] // block
    rows = x.numel() // max(1, x.shape[-1])
    x8 = torch.empty(x.shape, dtype=F.FP8_DTYPE, device=x.device)
    codes = torch.empty((*x.shape[:-1], nb), dtype=torch.uint8, device=x.device)
    if x.numel():
        block_r = _rows_per_program(x.shape[-1])
        _mxfp8_kernel[(triton.cdiv(rows, block_r),)](
            x, x8.view(torch.uint8), codes, rows, nb,
            BLOCK_R=block_r, NB_P2=triton.next_power_of_2(nb), BLK=block, num_warps=4,
        )
    return x8, codes


def _nvfp4(x, block, glob_rows, global_scale, stochastic, generator):
    """Launch the NVFP4 kernel; glob_rows None = per-row global computed in the kernel."""
    x = x.contiguous()
    nb = x.shape[-1] // block
    rows = x.numel() // max(1, x.shape[-1])
    codes = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=torch.uint8, device=x.device)
    bscale = torch.empty((*x.shape[:-1], nb), dtype=F.FP8_DTYPE, device=x.device)
    per_row = glob_rows is None
    if per_row:
        global_scale = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
        glob_rows = global_scale
    noise = F.nvfp4_noise(x, generator) if stochastic else x
    if x.numel():
        block_r = _rows_per_program(x.shape[-1])
        _nvfp4_kernel[(triton.cdiv(rows, block_r),)](
            x, noise, glob_rows, codes, bscale.view(torch.uint8), rows, nb,
            TINY=F.FP8_TINY, BLOCK_R=block_r, NB_P2=triton.next_power_of_2(nb), HALF=block // 2,
            GLOBAL_PER_ROW=per_row, STOCHASTIC=stochastic, num_warps=4,
        )
    return F.NVFP4Tensor(codes, bscale, global_scale)


def _nvfp4_checks(x: torch.Tensor, block: int) -> bool:
    """Shape errors as formats; True if the Triton kernel can take this call."""
    F._check_last_dim(x, block, "nvfp4")
    if block % 2:
        raise ValueError(f"nvfp4: block size {block} must be even (two codes per byte)")
    return can_run_triton(x) and _is_pow2(block)


def quantize_nvfp4(
    x: torch.Tensor,
    block: int = F.NVFP4_BLOCK,
    global_scale: torch.Tensor | None = None,
    stochastic: bool = False,
    generator: torch.Generator | None = None,
) -> F.NVFP4Tensor:
    """NVFP4 of x [..., N], as `formats.quantize_nvfp4` (same noise draws when `stochastic`).

    global_scale: fp32 broadcastable to x[..., :1], or None for the whole-tensor
    amax (not causally safe for activations; see :func:`quantize_nvfp4_per_token`).
    """
    if not _nvfp4_checks(x, block):
        return F.quantize_nvfp4(x, block, global_scale, stochastic, generator)
    if global_scale is None:
        global_scale = F.nvfp4_global_scale(x.abs().amax()).reshape((1,) * x.dim())
    global_scale = global_scale.float()
    glob_rows = global_scale.expand(*x.shape[:-1], 1).contiguous()
    return _nvfp4(x, block, glob_rows, global_scale, stochastic, generator)


def quantize_nvfp4_per_token(
    x: torch.Tensor, block: int = F.NVFP4_BLOCK, stochastic: bool = False, generator=None
) -> F.NVFP4Tensor:
    """NVFP4 with the causally safe per-token global scale computed in the same pass,
    as `formats.quantize_nvfp4_per_token`; global_scale [..., 1] fp32."""
    if not _nvfp4_checks(x, block):
        return F.quantize_nvfp4_per_token(x, block, stochastic, generator)
    return _nvfp4(x, block, None, None, stochastic, generator)


def requantize_fp8_token_blocks(x8: torch.Tensor, scale: torch.Tensor, block: int, transposed: bool = False):
    """Token-block fp8 of per-token fp8 values, as `formats.requantize_fp8_token_blocks`.

    x8 [..., S, D] (or [..., D, S] with `transposed`: the K-major copy, and the result is laid
    out the same way) float8_e4m3fn; scale [..., S] or [..., S, 1] fp32, one per token.
    Returns (bytes like x8, block scale [..., S // block, 1, 1] fp32).
    """
    seq = x8.shape[-1] if transposed else x8.shape[-2]
    tok_scale = scale.reshape(*x8.shape[:-2], seq).float().contiguous()
    if not (can_run_triton(x8) and _is_pow2(block)) or seq % block:
        rows = x8.transpose(-1, -2) if transposed else x8
        y8, bscale = F.requantize_fp8_token_blocks(rows, tok_scale[..., None], block)
        return (y8.transpose(-1, -2).contiguous() if transposed else y8), bscale
    x8 = x8.contiguous()
    dim = x8.shape[-2] if transposed else x8.shape[-1]
    bh = x8.numel() // max(1, seq * dim)
    y8 = torch.empty_like(x8)
    bscale = torch.empty((*x8.shape[:-2], seq // block, 1, 1), dtype=torch.float32, device=x8.device)
    if x8.numel():
        block_d = triton.next_power_of_2(dim)
        _fp8_requant_blocks_kernel[(bh, seq // block)](
            x8.view(torch.uint8), tok_scale, y8.view(torch.uint8), bscale, seq,
            # D a constexpr, as `_fp8_tokens`' launch: the d mask folds away, loads and stores are vectors
            D=dim, TINY=F.FP8_TINY, BLOCK_S=block, BLOCK_D=block_d, TRANSPOSED=transposed,
            num_warps=_num_warps(block * block_d),
        )
    return y8, bscale


def quantize_fp8_key_side(x: torch.Tensor, block: int, transposed: bool = False, launch: dict | None = None):
    """Per-token fp8 of x [..., S, D] and its off-diagonal token-block copy, in one read of x.

    Returns (x8, scale [..., S] fp32, xb8, block scale [..., S // block] fp32) with x8, xb8 laid
    out [..., S, D], or both [..., D, S] with `transposed` (Vᵀ, the P·V operand). The bytes
    equal `formats.quantize_fp8_per_token` and `formats.requantize_fp8_token_blocks` of them.
    launch: benchmark override {"num_warps"} (the same bytes).
    """
    launch = _check_launch(launch, ("num_warps",))
    seq, dim = x.shape[-2], x.shape[-1]
    if not (can_run_triton(x) and _is_pow2(block)) or seq % block or x.dim() < 2:
        x8, scale = F.quantize_fp8_per_token(x)
        xb8, bscale = F.requantize_fp8_token_blocks(x8, scale, block)
        if transposed:
            x8, xb8 = x8.transpose(-1, -2).contiguous(), xb8.transpose(-1, -2).contiguous()
        return x8, scale[..., 0], xb8, bscale.reshape(*x.shape[:-2], seq // block)
    x = x.contiguous()
    bh = x.numel() // max(1, seq * dim)
    x8, scale, xb8, bscale = _key_side_outputs(x, block, transposed)
    if x.numel():
        block_d = triton.next_power_of_2(dim)
        _fp8_key_side_kernel[(bh, seq // block)](
            x, x8.view(torch.uint8), scale, xb8.view(torch.uint8), bscale, seq,
            D=dim, TINY=F.FP8_TINY, BLOCK_S=block, BLOCK_D=block_d, TRANSPOSED=transposed,
            # 16 warps on the GPU: the pass is bound by its per-element instructions, which more threads
            # per tile spread (scripts/bench_prepass.py, H200, S = 8k, B×H = 64: K 0.263 -> 0.206 ms, Vᵀ
            # 0.283 -> 0.228 ms against 8 warps with two div_rn per element; with `_div_by_shared` K
            # 0.154 ms, Vᵀ 0.168 ms at 16 warps, 0.159 / 0.181 at 8, 0.144 / 0.166 at 32, same bytes). Since D
            # became a constexpr (vector loads and stores, session 21) the pass is bound by DRAM instead: K 0.081 ms
            # at 16 warps, 0.080 at 8
            num_warps=launch.get("num_warps") or (4 if INTERPRET else 16),
        )
    return x8, scale, xb8, bscale


def _key_side_parts(x: torch.Tensor, block: int, transposed: bool):
    """(shape, dtype) of a key-side pass's outputs over x [..., S, D]: ((x8, scale), (xb8, block scale)), the
    bytes [..., S, D], or [..., D, S] when transposed."""
    seq, dim = x.shape[-2], x.shape[-1]
    lead = tuple(x.shape[:-2])
    shape = (*lead, dim, seq) if transposed else (*lead, seq, dim)
    return ((shape, F.FP8_DTYPE), ((*lead, seq), torch.float32)), ((shape, F.FP8_DTYPE), ((*lead, seq // block),
                                                                                        torch.float32))


def _key_side_outputs(x: torch.Tensor, block: int, transposed: bool):
    """Empty (x8, scale, xb8, block scale) for a key-side pass over x (`_key_side_parts`)."""
    per_token, copy = _key_side_parts(x, block, transposed)
    return tuple(torch.empty(shape, dtype=dtype, device=x.device) for shape, dtype in (*per_token, *copy))


def _key_sides_outputs(k: torch.Tensor, block: int):
    """`_key_side_outputs` of K and of V (transposed, K's shape) in two allocations (`buffers.carve`): what the
    attention forward saves for the backward — the per-token bytes and scales, and K's and V's block scales (launch
    option fold_k, `attention_bwd.FOLD_V`) — and the token-block copies, which it drops; two calls instead of eight.
    The block scales sit in the saved allocation because a saved view holds its whole allocation alive: in the other
    they would keep both copies' bytes (a quarter of bf16's saved bytes) until the backward."""
    (k_tok, k_copy), (v_tok, v_copy) = _key_side_parts(k, block, False), _key_side_parts(k, block, True)
    k8, ks, kbs, v8, vs, vbs = carve(k.device, [*k_tok, k_copy[1], *v_tok, v_copy[1]])
    kb8, vb8 = carve(k.device, [k_copy[0], v_copy[0]])
    return (k8, ks, kb8, kbs), (v8, vs, vb8, vbs)


# the attention forward's first launch: `relaunch.Relaunch` (Triton's launch path once per plan)
_KEY_SIDES_LAUNCH = Relaunch(_fp8_key_sides_kernel) if HAS_TRITON else None


def quantize_fp8_key_sides(k: torch.Tensor, v: torch.Tensor, block: int, launch: dict | None = None,
                           p_order: bool = False, launch_dependents: bool = False):
    """`quantize_fp8_key_side(k, block)` and `quantize_fp8_key_side(v, block, transposed=True)` in one
    launch (the attention forward's K and Vᵀ): the same bytes and scales, returned as two tuples. K's
    and V's programs alternate, so the two passes share one tail instead of each ending on its own
    (H200, S = 8k, B×H = 64, D = 128: 0.152 ms, against K 0.081 + Vᵀ 0.086 ms as two launches,
    scripts/bench_prepass.py at a3dd5a5). launch: benchmark override {"num_warps"}.
    p_order: V's token-block copy with its keys in `formats.p_register_order` (the sm_90 forward's P·V operand
    order; `block` a multiple of 32), the same bytes otherwise. launch_dependents: the kernel launched next may
    start while this one's last programs run, where it is a programmatic dependent launch (the sm_90 forward's
    launch option pdl); no effect under the interpreter."""
    if k.shape != v.shape:
        raise ValueError(f"quantize_fp8_key_sides: k {tuple(k.shape)} and v {tuple(v.shape)} must have one shape")
    if p_order and block % F.P_ORDER_CHUNK:
        raise ValueError(f"quantize_fp8_key_sides: p_order needs block ({block}) a multiple of {F.P_ORDER_CHUNK}")
    launch = _check_launch(launch, ("num_warps",))
    seq, dim = k.shape[-2], k.shape[-1]
    if not (can_run_triton(k) and _is_pow2(block)) or seq % block or k.dim() < 2 or not k.numel():
        k_parts, v_parts = quantize_fp8_key_side(k, block, False, launch), quantize_fp8_key_side(v, block, True, launch)
        if p_order:
            v_parts = (*v_parts[:2], F.p_register_order(v_parts[2]), v_parts[3])
        return k_parts, v_parts
    k, v = k.contiguous(), v.contiguous()
    bh = k.numel() // (seq * dim)
    (k8, ks, kb8, kbs), (v8, vs, vb8, vbs) = k_outs, v_outs = _key_sides_outputs(k, block)
    _KEY_SIDES_LAUNCH(
        (2 * bh, seq // block),
        (k, k8.view(torch.uint8), ks, kb8.view(torch.uint8), kbs, v, v8.view(torch.uint8), vs, vb8.view(torch.uint8),
         vbs, seq),
        # D a constexpr: with D = BLOCK_D the tile's masks fold away, so loads and stores are vectors (with D a
        # run-time value each thread moved one element per instruction)
        dict(D=dim, TINY=F.FP8_TINY, BLOCK_S=block, BLOCK_D=triton.next_power_of_2(dim), P_ORDER=p_order,
             LAUNCH_DEPENDENTS=launch_dependents and not INTERPRET),
        # 8 warps, where each pass alone runs 16: the launch holds both programs' code, and at 16 warps it
        # took 0.224 ms against 0.152 at 8 (H200, S = 8k, B×H = 64, D = 128; K 0.081 + Vᵀ 0.086 apart)
        dict(num_warps=launch.get("num_warps") or (4 if INTERPRET else 8)),
    )
    return k_outs, v_outs


# launched through `relaunch.Relaunch` (host time a backward): Triton's launch path once per plan
_TOKENS_DELTA_LAUNCH = Relaunch(_fp8_tokens_delta_kernel) if HAS_TRITON else None


def quantize_fp8_per_token_with_delta(x: torch.Tensor, o8: torch.Tensor, o_scale: torch.Tensor,
                                      transposed: bool = False, row_l1: bool = False):
    """dO's per-token fp8 and the attention backward's delta, in one pass.

    x (dO) [..., S, D]; o8 float8_e4m3fn [..., S, D] with per-token o_scale [..., S] (the forward's
    saved O). Returns (x8, scale [..., S, 1], delta [..., S] fp32): x8 and scale are the bytes of
    `formats.quantize_fp8_per_token`; delta = rowsum(x8·scale ∘ o8·o_scale), as
    `attention_operands.backward_delta` (up to the order of the fp32 sum). transposed: also x8_t
    [..., D, S], the same bytes K-major (the FP8 dV product's B operand), written in the same pass. row_l1:
    last, each token's Σ_d |x8| [..., S] fp32 (the bytes' E4M3 values, unscaled: ρ's ‖dO8_i‖₁,
    `dq_row_scale.dq_row_scale_fast`), so that ρ need not read the bytes again.
    """
    if transposed and x.dim() < 2:
        raise ValueError(f"a transposed copy needs x of shape [..., S, D], got {tuple(x.shape)}")
    if x.dim() < 2 or not can_run_triton(x):
        x8, scale = F.quantize_fp8_per_token(x)
        delta = (F.dequantize_fp8(x8, scale) * F.dequantize_fp8(o8, o_scale[..., None])).sum(-1)
        out = (x8, scale, delta) + ((x8.transpose(-1, -2).contiguous(),) if transposed else ())
        return out + ((x8.float().abs().sum(-1),) if row_l1 else ())
    x = x.contiguous()
    seq, dim = x.shape[-2], x.shape[-1]
    bh = x.numel() // max(1, seq * dim)
    # the outputs live and die together (the backward's operands): one allocation (`buffers.carve`)
    parts = [(tuple(x.shape), F.FP8_DTYPE), ((*x.shape[:-1], 1), torch.float32), (tuple(x.shape[:-1]), torch.float32)]
    if transposed:
        parts.append(((*x.shape[:-2], dim, seq), F.FP8_DTYPE))
    if row_l1:
        parts.append((tuple(x.shape[:-1]), torch.float32))
    x8, scale, delta, *extra = carve(x.device, parts)
    x8t = extra[0] if transposed else x8
    l1 = extra[-1] if row_l1 else delta  # unread without WRITE_L1
    if x.numel():
        block_d = triton.next_power_of_2(dim)
        block_s = min(_rows_per_program(block_d), triton.next_power_of_2(seq))
        _TOKENS_DELTA_LAUNCH(
            (bh, triton.cdiv(seq, block_s)),
            (x, x8.view(torch.uint8), x8t.view(torch.uint8), scale, o8.contiguous().view(torch.uint8),
             o_scale.float().contiguous(), delta, l1, seq),
            # D a constexpr, as the key-side pass's: the masks fold away at D = BLOCK_D, loads and stores are vectors
            dict(D=dim, TINY=F.FP8_TINY, BLOCK_S=block_s, BLOCK_D=block_d, WRITE_T=transposed, WRITE_L1=row_l1),
            dict(num_warps=_num_warps(block_s * block_d)),
        )
    return (x8, scale, delta) + ((x8t,) if transposed else ()) + ((l1,) if row_l1 else ())
