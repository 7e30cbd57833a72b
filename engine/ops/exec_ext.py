"""Extension opcodes (200 up): mirror kernels/exec/exec_ext.h."""

X_BITSHIFT, X_CUMPROD, X_TOPK, X_SCATTER_ELEMENTS, X_SCATTER_ND, X_GATHER_ND = 200, 201, 202, 203, 204, 205
X_GRID_SAMPLE = 206
X_RMS_NORM = 207
X_ATTENTION = 208

# Scatter reductions (AIE_SR_*), by the ONNX attribute value.
SCATTER_REDUCTION = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}
