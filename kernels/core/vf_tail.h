/* Channel-block loads and stores over the vf_* vocabulary: `left` channels
 * remain from p on, a full vector when left >= VL, else a masked partial one
 * (its other lanes read as 0, never touched in memory). For the kernels that
 * sweep a channel axis in VL blocks (pool_body.h, conv_depthwise_body.h). */
#ifndef AIE_VF_TAIL_H
#define AIE_VF_TAIL_H

#include <stdint.h>

#ifdef VF_MASK_FREE
/* a masked access costs what a full one does (AVX-512): no branch */
static inline vf vf_load_upto(const float *p, int64_t left) { return vf_loadn(p, left >= VL ? VL : (int)left); }
static inline void vf_store_upto(float *p, int64_t left, vf v) { vf_storen(p, v, left >= VL ? VL : (int)left); }
#else
static inline vf vf_load_upto(const float *p, int64_t left) { return left >= VL ? vf_load(p) : vf_loadn(p, (int)left); }
static inline void vf_store_upto(float *p, int64_t left, vf v) {
    if (left >= VL)
        vf_store(p, v);
    else
        vf_storen(p, v, (int)left);
}
#endif

#endif /* AIE_VF_TAIL_H */
