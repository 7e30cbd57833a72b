/* Activations in double with libm: the reference of core/vmath_fn.h. */
#include <math.h>

#include "ref.h"

double aie_ref_act(int act, double x, double p0, double p1) {
    switch (act) {
    case AIE_U_RELU: return x < 0 ? 0.0 : x;
    case AIE_U_CLIP: return x < p0 ? p0 : (x > p1 ? p1 : x);
    case AIE_U_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
    case AIE_U_GELU_TANH: return x / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case AIE_U_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case AIE_U_SILU: return x / (1.0 + exp(-x));
    case AIE_U_HARDSWISH: {
        double t = x / 6.0 + 0.5;
        return x * (t < 0 ? 0.0 : (t > 1 ? 1.0 : t));
    }
    case AIE_U_HARDSIGMOID: {
        double t = p0 * x + p1;
        return t < 0 ? 0.0 : (t > 1 ? 1.0 : t);
    }
    case AIE_U_LEAKY_RELU: return x < 0 ? x * p0 : x;
    case AIE_U_TANH: return tanh(x);
    default: return x;
    }
}
