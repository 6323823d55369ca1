"""Flash attention with dropout as Triton kernels, straight from the query/key/value projection's output.

The dropout mask is kept as bits, laid out as Hopper's matrix units hold the scores; the backward writes the
three gradients and the projection bias's gradient itself.
"""

# Triton's kernels take untyped arguments by design (a kernel's types come from its launch) and Triton ships
# no type information; the functions around the kernels are typed.
# mypy: disable-error-code="no-untyped-def,untyped-decorator"

from __future__ import annotations

import math

import torch

from rollcall_workload.kernels import INTERPRETING, tl, triton
from rollcall_workload.kernels.philox import DROPOUT_ROUNDS, _drop_threshold, _philox, _scale

#
# Scaled dot-product attention straight from the query/key/value projection's output ([batch, seq,
# 3 * hidden]: each row's queries, then keys, then values, head by head), no mask, dropout on the
# probabilities. The forward is flash attention's (an online softmax over blocks of keys; each row's
# log-sum-exp saved, base 2); the backward recomputes the probabilities from it, one kernel for the keys'
# and values' gradients (a block of keys walking the queries), one for the queries' (a block of queries
# walking the keys), and writes all three into one tensor laid out as the projection's output, so
# nothing stacks them. The dropout decisions are bits, 32 a word: each head's [seq, seq] probabilities in
# tiles of 64 x 64 (padded), tile (column c, row r) at words (c * tiles + r) * 128 on, and bit b + 2j + 16h
# of its word 32w + l is row 16w + 8h + l // 4, column 8j + 2 (l % 4) + b of the tile: the elements that
# thread l of warp w holds of a Hopper MMA's 64 x 64 result with four warps, so a kernel turns a tile's 128
# words into its mask without moving data between threads (where it used a byte of eight neighbours, the
# forward's mask went through shared memory). Byte c of the head's word g is Philox call (bh * tiles *
# tiles * 128 + g) * 4 + c's eight decisions, 16-bit halves below round(p * 65536) dropped, as the
# LayerNorm kernels' elements are. The forward draws them and stores the words; both backward kernels read
# them, drawing nothing, since Philox's ten rounds a call cost the forward as much again as its matmuls at
# seq 512 when drawn three times. Blocks are multiples of 64 both ways. ``--attention triton``.

#: Query and key block sizes of the forward and of the backward kernels, and (forward, backward) warps.
ATTENTION_FORWARD_BLOCKS = (128, 64)
ATTENTION_BACKWARD_BLOCKS = (64, 64)
ATTENTION_WARPS = (8, 4)
#: Sequences up to this long take one backward kernel (:func:`_attention_bwd_whole`), with these warps. The
#: kernels are ``--attention auto``'s choice in bf16 where they are proven: faster than cuDNN's in the step
#: at seq 128 and 512 on an H200 (bench/NOTES.md).
ATTENTION_WHOLE_SEQ = 128
ATTENTION_WHOLE_WARPS = 8
_LOG2E = 1.4426950408889634

if triton is not None:

    @triton.jit
    def _attention_words(  # noqa: PLR0917 - a Triton function's arguments are positional
        bh, row0, col0, S: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """(the words of the tiles of rows ``row0``.. and columns ``col0``.. of head ``bh``; which exist).

        Shaped ``[COLS // 64, ROWS // 64, 128]``: a block's tiles, each tile's 128 words.
        """
        T: tl.constexpr = (S + 63) // 64  # tiles a side
        ct = col0 // 64 + tl.arange(0, COLS // 64)
        rt = row0 // 64 + tl.arange(0, ROWS // 64)
        tiles = (bh.to(tl.int64) * T + ct[:, None]) * T + rt[None, :]
        return tiles[:, :, None] * 128 + tl.arange(0, 128)[None, None, :], (rt < T)[None, :, None]

    @triton.jit
    def _attention_draw(
        seed, words, threshold, ROUNDS: tl.constexpr
    ):  # pragma: no cover - GPU or interpreter
        """The kept bits of ``words``: byte c of word g is Philox call 4g + c's eight decisions."""
        word = _attention_kept_byte(seed, words * 4, threshold, ROUNDS)
        for c in tl.static_range(1, 4):
            word |= _attention_kept_byte(seed, words * 4 + c, threshold, ROUNDS) << (8 * c)
        return word

    @triton.jit
    def _attention_kept_byte(
        seed, calls, threshold, ROUNDS: tl.constexpr
    ):  # pragma: no cover - GPU or interpreter
        """Eight decisions of each Philox call: bits 2i and 2i + 1 from number i's low and high halves."""
        r0, r1, r2, r3 = _philox(seed, calls, ROUNDS)
        bits = _attention_kept_pair(r0, threshold) | (_attention_kept_pair(r1, threshold) << 2)
        return bits | (_attention_kept_pair(r2, threshold) << 4) | (_attention_kept_pair(r3, threshold) << 6)

    @triton.jit
    def _attention_kept_pair(r, threshold):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """Bits 0 and 1: whether the low and the high 16-bit half of ``r`` keep their elements."""
        low = ((r & 0xFFFF).to(tl.int32) >= threshold).to(tl.int32)
        return low | (((r >> 16).to(tl.int32) >= threshold).to(tl.int32) << 1)

    @triton.jit
    def _attention_unpack(
        words, ROWS: tl.constexpr, COLS: tl.constexpr
    ):  # pragma: no cover - GPU or interpreter
        """A block's kept probabilities (``[ROWS, COLS]``) from its tiles' words (:func:`_attention_words`).

        Bit b + 2j + 16h of word 32w + l is row 16w + 8h + l // 4, column 8j + 2 (l % 4) + b of its tile.
        """
        e = tl.reshape(words, (COLS // 64, ROWS // 64, 4, 8, 4))  # tile column, tile row, w, l // 4, l % 4
        e = tl.join(e, e >> 1)  # b
        e = tl.join(e, e >> 2)  # the three bits of j
        e = tl.join(e, e >> 4)
        e = tl.join(e, e >> 8)
        e = tl.join(e, e >> 16)  # h
        e = tl.permute(e, (1, 2, 9, 3, 0, 8, 7, 6, 4, 5))
        return tl.reshape(e & 1, (ROWS, COLS)) != 0

    @triton.jit
    def _attention_fwd(  # noqa: PLR0917 - a kernel's arguments are positional
        QKV,
        OUT,
        LSE,
        KEPT,
        SEED,
        S: tl.constexpr,
        threshold,
        drop_scale,
        qk_scale,
        HEADS: tl.constexpr,
        D: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        DROPOUT: tl.constexpr,
        ROUNDS: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter (tests/unit/fused_norm_cases.py)
        hidden: tl.constexpr = HEADS * D
        bh = tl.program_id(1)
        n, h = bh // HEADS, bh % HEADS
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, D)
        base = QKV + n.to(tl.int64) * S * 3 * hidden + h * D
        q = tl.load(base + rows[:, None] * 3 * hidden + dims[None, :], mask=rows[:, None] < S, other=0.0)
        seed = tl.load(SEED)
        m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
        l_i = tl.zeros((BLOCK_M,), tl.float32)
        acc = tl.zeros((BLOCK_M, D), tl.float32)
        for start in range(0, S, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            at = cols[:, None] * 3 * hidden + dims[None, :]
            if DROPOUT:  # drawn before the scores, so Philox's registers are free again for them
                words, exist = _attention_words(bh, tl.program_id(0) * BLOCK_M, start, S, BLOCK_M, BLOCK_N)
                kept = _attention_draw(seed, words, threshold, ROUNDS)
                tl.store(KEPT + words, kept, mask=exist)
            k = tl.load(base + hidden + at, mask=cols[:, None] < S, other=0.0)
            v = tl.load(base + 2 * hidden + at, mask=cols[:, None] < S, other=0.0)
            qk = tl.dot(q, tl.trans(k))
            if S % BLOCK_N:  # a partial last block of keys
                qk = tl.where(cols[None, :] < S, qk, float("-inf"))
            # the scale (positive) applied to the row's maximum, then in the exponent's one FFMA
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            p = p.to(v.dtype)
            if DROPOUT:
                p = tl.where(_attention_unpack(kept, BLOCK_M, BLOCK_N), p, 0.0)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m_i = m_new
        out = acc * (drop_scale / l_i)[:, None]
        o_at = OUT + n.to(tl.int64) * S * hidden + h * D + rows[:, None] * hidden + dims[None, :]
        tl.store(o_at, out.to(OUT.dtype.element_ty), mask=rows[:, None] < S)
        tl.store(LSE + bh.to(tl.int64) * S + rows, m_i + tl.math.log2(l_i), mask=rows < S)

    @triton.jit
    def _attention_delta(
        OUT, o_at, inside, do, drop_scale
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """Each row's sum of dO * O (what softmax's backward subtracts) over the dropout's scale.

        :func:`_attention_bwd_scores` leaves that scale out; the callers apply it once to the sums.
        """
        o = tl.load(OUT + o_at, mask=inside, other=0.0).to(tl.float32)
        return tl.sum(o * do.to(tl.float32), 1) / drop_scale

    @triton.jit
    def _attention_keys(  # noqa: PLR0917 - a Triton function's arguments are positional
        QKV, base, cols, S, HIDDEN: tl.constexpr, D: tl.constexpr
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """The keys and values of ``cols`` (zero past ``S``) of the head at ``base``."""
        at = base + cols[:, None] * 3 * HIDDEN + tl.arange(0, D)[None, :]
        k = tl.load(QKV + HIDDEN + at, mask=cols[:, None] < S, other=0.0)
        v = tl.load(QKV + 2 * HIDDEN + at, mask=cols[:, None] < S, other=0.0)
        return k, v

    @triton.jit
    def _attention_queries(  # noqa: PLR0917 - a Triton function's arguments are positional
        QKV, DO, LSE, bh, base, o_base, rows, S, HIDDEN: tl.constexpr, D: tl.constexpr
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """The queries of ``rows`` (zero past ``S``), their output's gradient and log-sum-exp."""
        dims = tl.arange(0, D)
        inside = rows[:, None] < S
        q = tl.load(QKV + base + rows[:, None] * 3 * HIDDEN + dims[None, :], mask=inside, other=0.0)
        do = tl.load(DO + o_base + rows[:, None] * HIDDEN + dims[None, :], mask=inside, other=0.0)
        lse = tl.load(LSE + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0)
        return q, do, lse

    @triton.jit
    def _attention_bwd_scores(  # noqa: PLR0917 - the two backward kernels' shared step
        q,
        k,
        v,
        do,
        lse,
        delta,
        rows,
        row0,
        cols0,
        bh,
        KEPT,
        S: tl.constexpr,
        qk_scale,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        DROPOUT: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """(the kept probabilities; the scores' gradient) of one block of queries by one of keys.

        Both without the dropout's scale, which the callers apply once to the sums they make of them
        (``delta``: :func:`_attention_delta`'s, over that scale).
        """
        cols = cols0 + tl.arange(0, BLOCK_N)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        p = tl.math.exp2(qk - lse[:, None])
        if S % BLOCK_M or S % BLOCK_N:  # a partial last block
            p = tl.where((rows[:, None] < S) & (cols[None, :] < S), p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        if DROPOUT:
            words, exist = _attention_words(bh, row0, cols0, S, BLOCK_M, BLOCK_N)
            keep = _attention_unpack(tl.load(KEPT + words, mask=exist, other=0), BLOCK_M, BLOCK_N)
            kept = tl.where(keep, p, 0.0)
            dp = tl.where(keep, dp, 0.0)
        else:
            kept = p
        return kept, p * (dp - delta[:, None])

    @triton.jit
    def _attention_bwd(  # noqa: PLR0917 - a kernel's arguments are positional
        QKV,
        OUT,
        DO,
        LSE,
        DELTA,
        DQKV,
        DB,
        KEPT,
        S: tl.constexpr,
        drop_scale,
        qk_scale,
        sm_scale,
        HEADS: tl.constexpr,
        D: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        DROPOUT: tl.constexpr,
        FOR_QUERIES: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """The gradients of a block of keys and values, walking the queries; or (``FOR_QUERIES``) of queries.

        The queries' kernel runs first and stores each of its rows' sum of dO * O (the share of the
        probabilities' gradient that softmax's backward subtracts), which the keys' kernel reads. Either sums
        its block's rows into the projection's bias's gradient (rows past S are zero), one row of partial sums
        per block.
        """
        hidden: tl.constexpr = HEADS * D
        bh = tl.program_id(1)
        n, h = bh // HEADS, bh % HEADS
        dims = tl.arange(0, D)
        base = n.to(tl.int64) * S * 3 * hidden + h * D
        o_base = n.to(tl.int64) * S * hidden + h * D
        db = DB + (n.to(tl.int64) * tl.num_programs(0) + tl.program_id(0)) * 3 * hidden + h * D + dims
        if FOR_QUERIES:
            rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
            q, do, lse = _attention_queries(QKV, DO, LSE, bh, base, o_base, rows, S, hidden, D)
            delta = _attention_delta(
                OUT, o_base + rows[:, None] * hidden + dims[None, :], rows[:, None] < S, do, drop_scale
            )
            tl.store(DELTA + bh.to(tl.int64) * S + rows, delta, mask=rows < S)
            dq = tl.zeros((BLOCK_M, D), tl.float32)
            for start in range(0, S, BLOCK_N):
                k, v = _attention_keys(QKV, base, start + tl.arange(0, BLOCK_N), S, hidden, D)
                _, ds = _attention_bwd_scores(
                    q,
                    k,
                    v,
                    do,
                    lse,
                    delta,
                    rows,
                    tl.program_id(0) * BLOCK_M,
                    start,
                    bh,
                    KEPT,
                    S,
                    qk_scale,
                    BLOCK_M,
                    BLOCK_N,
                    DROPOUT,
                )
                dq += tl.dot(ds.to(k.dtype), k)
            dq = (dq * (sm_scale * drop_scale)).to(DQKV.dtype.element_ty)
            tl.store(DQKV + base + rows[:, None] * 3 * hidden + dims[None, :], dq, mask=rows[:, None] < S)
            tl.store(db, tl.sum(dq.to(tl.float32), 0))
        else:
            cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
            at = base + cols[:, None] * 3 * hidden + dims[None, :]
            k, v = _attention_keys(QKV, base, cols, S, hidden, D)
            dk = tl.zeros((BLOCK_N, D), tl.float32)
            dv = tl.zeros((BLOCK_N, D), tl.float32)
            for start in range(0, S, BLOCK_M):
                rows = start + tl.arange(0, BLOCK_M)
                q, do, lse = _attention_queries(QKV, DO, LSE, bh, base, o_base, rows, S, hidden, D)
                delta = tl.load(DELTA + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0)
                kept, ds = _attention_bwd_scores(
                    q,
                    k,
                    v,
                    do,
                    lse,
                    delta,
                    rows,
                    start,
                    tl.program_id(0) * BLOCK_N,
                    bh,
                    KEPT,
                    S,
                    qk_scale,
                    BLOCK_M,
                    BLOCK_N,
                    DROPOUT,
                )
                dv += tl.dot(tl.trans(kept.to(do.dtype)), do)
                dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
            dk = (dk * (sm_scale * drop_scale)).to(DQKV.dtype.element_ty)
            dv = (dv * drop_scale).to(DQKV.dtype.element_ty)
            tl.store(DQKV + hidden + at, dk, mask=cols[:, None] < S)
            tl.store(DQKV + 2 * hidden + at, dv, mask=cols[:, None] < S)
            tl.store(db + hidden, tl.sum(dk.to(tl.float32), 0))
            tl.store(db + 2 * hidden, tl.sum(dv.to(tl.float32), 0))

    @triton.jit
    def _attention_bwd_whole(  # noqa: PLR0917 - a kernel's arguments are positional
        QKV,
        OUT,
        DO,
        LSE,
        DQKV,
        DB,
        KEPT,
        S: tl.constexpr,
        drop_scale,
        qk_scale,
        sm_scale,
        HEADS: tl.constexpr,
        D: tl.constexpr,
        BLOCK: tl.constexpr,
        DROPOUT: tl.constexpr,
    ):  # pragma: no cover - runs on a GPU, or in Triton's interpreter
        """Every gradient of one head whose queries and keys all fit one block (``S`` up to ``BLOCK``).

        The scores and their gradient are computed once rather than by each of the two kernels above, and
        each row's sum of dO * O here rather than by a kernel of its own; the bias's partial sums are one row
        a batch element.
        """
        hidden: tl.constexpr = HEADS * D
        bh = tl.program_id(0)
        n, h = bh // HEADS, bh % HEADS
        dims = tl.arange(0, D)
        rows = tl.arange(0, BLOCK)
        base = n.to(tl.int64) * S * 3 * hidden + h * D
        o_at = n.to(tl.int64) * S * hidden + h * D + rows[:, None] * hidden + dims[None, :]
        inside = rows[:, None] < S
        at = base + rows[:, None] * 3 * hidden + dims[None, :]
        q = tl.load(QKV + at, mask=inside, other=0.0)
        k, v = _attention_keys(QKV, base, rows, S, hidden, D)
        do = tl.load(DO + o_at, mask=inside, other=0.0)
        delta = _attention_delta(OUT, o_at, inside, do, drop_scale)
        lse = tl.load(LSE + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0)
        kept, ds = _attention_bwd_scores(
            q, k, v, do, lse, delta, rows, 0, 0, bh, KEPT, S, qk_scale, BLOCK, BLOCK, DROPOUT
        )
        dq = (tl.dot(ds.to(k.dtype), k) * (sm_scale * drop_scale)).to(DQKV.dtype.element_ty)
        dk = (tl.dot(tl.trans(ds.to(q.dtype)), q) * (sm_scale * drop_scale)).to(DQKV.dtype.element_ty)
        dv = (tl.dot(tl.trans(kept.to(do.dtype)), do) * drop_scale).to(DQKV.dtype.element_ty)
        tl.store(DQKV + at, dq, mask=inside)
        tl.store(DQKV + hidden + at, dk, mask=inside)
        tl.store(DQKV + 2 * hidden + at, dv, mask=inside)
        db = DB + n.to(tl.int64) * 3 * hidden + h * D + dims
        tl.store(db, tl.sum(dq.to(tl.float32), 0))
        tl.store(db + hidden, tl.sum(dk.to(tl.float32), 0))
        tl.store(db + 2 * hidden, tl.sum(dv.to(tl.float32), 0))


def _attention_shape(qkv: torch.Tensor, heads: int) -> tuple[int, int, int, int]:
    """(batch, seq, hidden, head size) of a ``[batch, seq, 3 * hidden]`` projection output."""
    batch, seq, three_hidden = qkv.shape
    return batch, seq, three_hidden // 3, three_hidden // 3 // heads


@torch.library.custom_op("rollcall::attention", mutates_args=())
def _attention(
    qkv: torch.Tensor, bias: torch.Tensor, seed: torch.Tensor, p: float, heads: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(attention output [batch, seq, hidden], each row's log-sum-exp (base 2), the kept probabilities)``.

    See above; the kept probabilities are bits, 32 a word (``[batch * heads, tiles * tiles * 128]`` int32 for
    ``tiles`` of 64 a side; empty at ``p`` 0), so the backward reads them rather than drawing them twice
    more. ``bias`` is the projection's (already in ``qkv``): not read, its gradient is the backward's.
    """
    batch, seq, hidden, d = _attention_shape(qkv, heads)
    qkv = qkv.contiguous()
    out = qkv.new_empty(batch, seq, hidden)
    lse = torch.empty(batch * heads, seq, device=qkv.device, dtype=torch.float32)
    kept = _attention_kept_bits(qkv, heads, p)
    block_m, block_n = ATTENTION_FORWARD_BLOCKS
    _attention_fwd[(triton.cdiv(seq, block_m), batch * heads)](
        qkv,
        out,
        lse,
        kept,
        seed,
        seq,
        _drop_threshold(p),
        _scale(p),
        d**-0.5 * _LOG2E,
        HEADS=heads,
        D=d,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        DROPOUT=p > 0,
        ROUNDS=DROPOUT_ROUNDS,
        num_warps=ATTENTION_WARPS[0],
    )
    return out, lse, kept


def _attention_kept_bits(qkv: torch.Tensor, heads: int, p: float) -> torch.Tensor:
    """Room for :func:`_attention`'s kept probabilities, a bit each (none without dropout)."""
    batch, seq, _, _ = _attention_shape(qkv, heads)
    tiles = -(-seq // 64)
    shape = (batch * heads, tiles * tiles * 128) if p > 0 else (0,)
    return torch.empty(shape, device=qkv.device, dtype=torch.int32)


@_attention.register_fake
def _(
    qkv: torch.Tensor, bias: torch.Tensor, seed: torch.Tensor, p: float, heads: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, seq, hidden, _ = _attention_shape(qkv, heads)
    lse = qkv.new_empty(batch * heads, seq, dtype=torch.float32)
    return qkv.new_empty(batch, seq, hidden), lse, _attention_kept_bits(qkv, heads, p)


@torch.library.custom_op("rollcall::attention_backward", mutates_args=())
def _attention_backward(  # noqa: PLR0917 - the op's schema is positional
    dout: torch.Tensor,
    qkv: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    kept: torch.Tensor,
    p: float,
    heads: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of :func:`_attention`'s input (laid out as it) and of the projection's bias (float32)."""
    batch, seq, _, d = _attention_shape(qkv, heads)
    qkv, dout = qkv.contiguous(), dout.contiguous()
    dqkv = torch.empty_like(qkv)
    if seq <= ATTENTION_WHOLE_SEQ:
        db = torch.empty(batch, qkv.size(-1), device=qkv.device, dtype=torch.float32)
        _attention_bwd_whole[(batch * heads,)](
            qkv,
            out,
            dout,
            lse,
            dqkv,
            db,
            kept,
            seq,
            _scale(p),
            d**-0.5 * _LOG2E,
            d**-0.5,
            HEADS=heads,
            D=d,
            BLOCK=max(64, triton.next_power_of_2(seq)),
            DROPOUT=p > 0,
            num_warps=ATTENTION_WHOLE_WARPS,
        )
        return dqkv, db.sum(0)
    delta = torch.empty_like(lse)
    block_m, block_n = ATTENTION_BACKWARD_BLOCKS
    # the bias's gradient summed per block of rows by both kernels, then over blocks
    blocks = max(triton.cdiv(seq, block_m), triton.cdiv(seq, block_n))
    db = torch.zeros(batch * blocks, qkv.size(-1), device=qkv.device, dtype=torch.float32)
    args = (
        qkv,
        out,
        dout,
        lse,
        delta,
        dqkv,
        db,
        kept,
        seq,
        _scale(p),
        d**-0.5 * _LOG2E,
        d**-0.5,
    )
    shape = {"HEADS": heads, "D": d, "BLOCK_M": block_m, "BLOCK_N": block_n, "DROPOUT": p > 0}
    for for_queries, block in ((True, block_m), (False, block_n)):  # the queries' first: they sum dO * O
        _attention_bwd[(triton.cdiv(seq, block), batch * heads)](
            *args, **shape, FOR_QUERIES=for_queries, num_warps=ATTENTION_WARPS[1]
        )
    return dqkv, db.sum(0)


@_attention_backward.register_fake
def _(  # noqa: PLR0917 - the op's schema is positional
    dout: torch.Tensor,
    qkv: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    kept: torch.Tensor,
    p: float,
    heads: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    dqkv = torch.empty_like(qkv, memory_format=torch.contiguous_format)
    return dqkv, qkv.new_empty(qkv.size(-1), dtype=torch.float32)


def _attention_setup_context(ctx: torch.autograd.function.FunctionCtx, inputs: tuple, output: tuple) -> None:  # type: ignore[type-arg]
    qkv, bias, _, p, heads = inputs
    out, lse, kept = output
    ctx.save_for_backward(qkv, out, lse, kept)
    ctx.p, ctx.heads, ctx.bias_dtype = p, heads, bias.dtype  # type: ignore[attr-defined]


def _attention_autograd_backward(
    ctx: torch.autograd.function.FunctionCtx, dout: torch.Tensor, *_: torch.Tensor
) -> tuple[torch.Tensor | None, ...]:
    qkv, out, lse, kept = ctx.saved_tensors  # type: ignore[attr-defined]
    dqkv, db = _attention_backward(dout, qkv, out, lse, kept, ctx.p, ctx.heads)  # type: ignore[attr-defined]
    return dqkv, db.to(ctx.bias_dtype), None, None, None  # type: ignore[attr-defined]


_attention.register_autograd(_attention_autograd_backward, setup_context=_attention_setup_context)


def kept_mask(words: torch.Tensor, s: int) -> torch.Tensor:
    """The kept probabilities as a ``[batch * heads, s, s]`` mask, from the kernels' words.

    The words are ``[batch * heads, tiles * tiles * 128]`` int32, as :func:`_attention` returns them.
    Tile (column c, row r) of a head is words (c * tiles + r) * 128 on; bit b + 2j + 16h of its word 32w + l
    is row 16w + 8h + l // 4, column 8j + 2 (l % 4) + b of the tile.
    """
    heads, tiles = words.size(0), math.isqrt(words.size(1) // 128)
    bits = (words.view(heads, tiles, tiles, 4, 8, 4, 1) >> torch.arange(32, device=words.device)) & 1
    bits = bits.view(heads, tiles, tiles, 4, 8, 4, 2, 8, 2)  # c, r, w, l // 4, l % 4, h, j, b
    rows_then_columns = bits.permute(0, 2, 3, 6, 4, 1, 7, 5, 8).reshape(heads, tiles * 64, tiles * 64)
    return rows_then_columns[:, :s, :s].bool()


def triton_attention_available(device: torch.device, seq: int, head_size: int) -> bool:
    """Whether :func:`attention` can run here.

    On CUDA or in the interpreter, for a sequence length that is a multiple of 8 and a head size that is a
    power of two from 16.
    """
    return (
        triton is not None
        and (device.type == "cuda" or INTERPRETING)
        and seq % 8 == 0
        and head_size >= 16
        and head_size & (head_size - 1) == 0
    )


def _half_precision(x: torch.Tensor) -> bool:
    """Whether a layer taking ``x`` computes in bf16 (``x``'s own, or autocast's): the workload's precisions.

    The kernels' matmuls then match PyTorch's; in float32 they would round to tf32 where PyTorch's would not.
    """
    kind = x.device.type
    return x.dtype == torch.bfloat16 or (
        torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == torch.bfloat16
    )


def attention(qkv: torch.Tensor, bias: torch.Tensor, heads: int, p: float) -> torch.Tensor:
    """Attention of ``qkv`` (``[batch, seq, 3 * hidden]``) with dropout ``p``: ``[batch, seq, hidden]``.

    The Triton kernels above (:func:`triton_attention_available`); ``bias`` is the projection's, already in
    ``qkv``, whose gradient they sum: the projection must not (pass it its bias detached).
    """
    seed = torch.randint(0, 2**31 - 1, (1,), device=qkv.device, dtype=torch.int64)
    return _attention(qkv, bias, seed, p, heads)[0]  # type: ignore[no-any-return]
