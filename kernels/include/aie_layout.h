/*
 * Data movement: copies that reorder, select or replicate elements. They are
 * dtype-generic: elements are elem_size bytes (1, 2, 4 or 8) and only moved,
 * never interpreted, so one kernel serves float32, int64, bool, ...
 * Shapes have ndim <= AIE_MAX_DIMS (aie_eltwise.h); strides are in elements.
 * Outputs are contiguous row-major and never alias the input. Work is split
 * over the outer output dims with aie_parallel_for; a copy has no arithmetic,
 * so results are identical for every ISA and thread count.
 *
 * resize2d is float32 only and handles the two layouts NCHW and NHWC.
 */
#ifndef AIE_LAYOUT_H
#define AIE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y (contiguous, `shape`) = x[sum_d i_d * x_strides[d]]. Strides may be 0
 * (broadcast: Expand) or negative (reversed slices). The copy is blocked so
 * that a transposing stride pattern walks both sides in cache-sized tiles. */
int aie_copy_strided(size_t elem_size, int ndim, const int64_t *shape,
                     const void *x, const int64_t *x_strides, void *y, int nthreads);

/* y = x.transpose(perm): y's dim d is x's dim perm[d]. */
int aie_transpose(size_t elem_size, int ndim, const int64_t *shape, const int64_t *perm,
                  const void *x, void *y, int nthreads);

/* numpy.broadcast_to(x, out_shape): x_shape is right-aligned to out_shape
 * (x_ndim <= ndim) and each of its dims is 1 or equal to the output's. */
int aie_expand(size_t elem_size, int ndim, const int64_t *out_shape,
               int x_ndim, const int64_t *x_shape, const void *x, void *y, int nthreads);

/* numpy.tile(x, reps) with len(reps) == ndim: y dim d = shape[d] * reps[d]. */
int aie_tile(size_t elem_size, int ndim, const int64_t *shape, const int64_t *reps,
             const void *x, void *y, int nthreads);

/* Gather along an axis: x viewed as [outer, axis_len, inner], y as
 * [outer, nidx, inner]; y[o][j][i] = x[o][idx[j]][i]. Negative indices count
 * from the end; an index outside [-axis_len, axis_len) is AIE_EINVAL and the
 * message names it and its position. */
int aie_gather(size_t elem_size, const void *x, int64_t outer, int64_t axis_len, int64_t inner,
               const int64_t *indices, int64_t nidx, void *y, int nthreads);

/* Concatenate n tensors along an axis: input k viewed as [outer, axis_lens[k], inner]. */
int aie_concat(size_t elem_size, int n, const void *const *xs, const int64_t *axis_lens,
               int64_t outer, int64_t inner, void *y, int nthreads);

/* The inverse: x viewed as [outer, sum(axis_lens), inner] into n outputs. */
int aie_split(size_t elem_size, const void *x, int64_t outer, int64_t inner,
              int n, const int64_t *axis_lens, void *const *ys, int nthreads);

/* y[i...] = x[starts[d] + i_d * steps[d]]: starts already resolved to valid
 * indices (ONNX/numpy clamping is the caller's), steps non-zero (negative
 * walks backwards), out_shape the number of elements taken per dim. Every
 * index touched is checked to be inside x; AIE_EINVAL otherwise. */
int aie_slice(size_t elem_size, int ndim, const int64_t *shape, const void *x,
              const int64_t *starts, const int64_t *steps, const int64_t *out_shape,
              void *y, int nthreads);

typedef enum {
    AIE_PAD_CONSTANT = 0, /* fill with *value (elem_size bytes) */
    AIE_PAD_REFLECT = 1,  /* mirror without repeating the edge: pad < dim */
    AIE_PAD_EDGE = 2,     /* repeat the edge element: dim > 0 when padded */
    AIE_PAD_WRAP = 3      /* periodic: pad <= dim */
} aie_pad_mode;

/* ONNX Pad: pads = [begin_0 .. begin_{n-1}, end_0 .. end_{n-1}], all >= 0
 * (negative ONNX pads are a slice the caller does first). */
int aie_pad(size_t elem_size, int ndim, const int64_t *shape, const void *x,
            const int64_t *pads, int mode, const void *value, void *y, int nthreads);

typedef enum { AIE_LAYOUT_NCHW = 0, AIE_LAYOUT_NHWC = 1 } aie_image_layout;
typedef enum { AIE_RESIZE_NEAREST = 0, AIE_RESIZE_LINEAR = 1 } aie_resize_mode;
/* ONNX Resize coordinate_transformation_mode: where output pixel i samples
 * the input, with scale = output/input (or the given scale):
 *   HALF_PIXEL          (i + 0.5) / scale - 0.5
 *   ASYMMETRIC          i / scale
 *   ALIGN_CORNERS       i * (in - 1) / (L - 1)   (0 when L == 1)
 *   PYTORCH_HALF_PIXEL  out > 1 ? (i + 0.5) / scale - 0.5 : 0
 * where L = scale * in in double — the ONNX reference's "output_width",
 * which differs from out when in * scale is not an integer. */
typedef enum {
    AIE_COORD_HALF_PIXEL = 0,
    AIE_COORD_ASYMMETRIC = 1,
    AIE_COORD_ALIGN_CORNERS = 2,
    AIE_COORD_PYTORCH_HALF_PIXEL = 3
} aie_coord_mode;
/* ONNX nearest_mode: how a fractional source coordinate becomes an index. */
typedef enum {
    AIE_NEAREST_ROUND_PREFER_FLOOR = 0,
    AIE_NEAREST_ROUND_PREFER_CEIL = 1,
    AIE_NEAREST_FLOOR = 2,
    AIE_NEAREST_CEIL = 3
} aie_nearest_mode;

/* 2-D resize of a float32 image batch (n images of c channels, h x w) to
 * oh x ow. scale_h/scale_w are ONNX's scales (the float32 values given, or
 * oh / h and ow / w computed in double when sizes were given, as the ONNX
 * reference does). Source coordinates are computed in double, then clamped
 * to the image (the reference's edge padding). LINEAR is bilinear over the
 * 2 x 2 neighbours. */
int aie_resize2d(const float *x, float *y, int layout, int64_t n, int64_t c,
                 int64_t h, int64_t w, int64_t oh, int64_t ow,
                 double scale_h, double scale_w, int mode, int coord_mode, int nearest_mode,
                 int nthreads);

#ifdef __cplusplus
}
#endif
#endif /* AIE_LAYOUT_H */
