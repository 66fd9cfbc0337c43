// The packed-batch layout and the causal mask of the attention days (10 forward, 20
// backward): forward and backward must agree on which keys a query sees, so the rule lives
// here once, and so does applying it to a register fragment (mask_fragment).
//
// Sequences are packed one after another: cu_q / cu_k hold where each starts (batch + 1
// entries). The causal mask is aligned bottom-right, as FlashAttention 2.1 and later: query i
// of a sequence of lq queries and lk keys sees keys j < i + 1 + lk - lq, so the last query
// sees every key; when lq > lk the first lq - lk queries see none.
#pragma once

// LOG2E and LN2: common.cuh.

struct Sequence {
    int q0, lq;  // first token and length of the queries
    int k0, lk;  // and of the keys
};

__device__ __forceinline__ Sequence sequence(const int* cu_q, const int* cu_k, int b) {
    return {cu_q[b], cu_q[b + 1] - cu_q[b], cu_k[b], cu_k[b + 1] - cu_k[b]};
}

// The keys query i sees are 0 .. key_end - 1.
__device__ __forceinline__ int key_end(int i, const Sequence& s, int causal) {
    if (!causal) return s.lk;
    const int end = i + 1 + s.lk - s.lq;
    return end < 0 ? 0 : (end > s.lk ? s.lk : end);
}

// Whether query i of the sequence sees key j (both possibly past the ends of their tiles).
__device__ __forceinline__ bool visible(int i, int j, const Sequence& s, int causal) {
    return i < s.lq && j < key_end(i, s, causal);
}

// The first query that sees key j: keys are hidden from queries i < j + lq - lk (causal).
__device__ __forceinline__ int first_query(int j, const Sequence& s, int causal) {
    if (!causal) return 0;
    const int i = j + s.lq - s.lk;
    return i < 0 ? 0 : i;
}

// quote: mask_fragment
// Sets the elements of an accumulator fragment that `visible(row, column)` rejects to `masked`
// (-inf for scores, 0 for probabilities). The fragment is BLOCKS blocks of 8 columns, 4
// registers each, as mma.sync m16n8 and each warp's rows of a wgmma m64 leave them: element e of
// block j is row e / 2 of the thread's two (lane / 4 and lane / 4 + 8), column 8j + 2t + e % 2,
// t = lane % 4. Rows and columns are the fragment's own: the caller's predicate adds its tile's
// origin, and says whether rows are queries (S = Q K^T) or keys (the backward's S^T = K Q^T).
template <int BLOCKS, typename Visible>
__device__ __forceinline__ void mask_fragment(float* fragment, int t, float masked,
                                              Visible visible) {
#pragma unroll
    for (int j = 0; j < BLOCKS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (!visible(e / 2, 8 * j + 2 * t + e % 2)) fragment[4 * j + e] = masked;
}
// end quote: mask_fragment

// quote: item_slot
// A work item as a persistent attention kernel's producer hands it to its consumers (day 10's
// fa_hopper): the first query row of the tile, the head and the sequence (i0 < 0: no more
// work). One slot per Q stage, read by one thread of each consumer warp (lane 0, which
// shuffles it to the others), and two orders keep it:
//   - write before read: the producer writes it, then arrives on q_full (a release); each
//     reader waits on q_full (an acquire) before reading it;
//   - read before the next write: each reader arrives on q_empty itself once its warp is done
//     with the item's Q (q_empty counts 4 arrivals per consumer warpgroup); the producer
//     waits for all of them before rewriting the slot.
// mbarrier.arrive releases only the arriving thread's own earlier accesses, so every reader
// arrives (what racecheck made of an earlier arrangement: day 10's notes, "The item slot").
struct __align__(16) ItemSlot {
    int i0, h;
    Sequence s;
};
// end quote: item_slot
