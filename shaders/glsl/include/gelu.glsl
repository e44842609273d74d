// GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2, Gemma).
// The argument is clamped so tanh's exponentials cannot overflow; tanh(15) is 1 in f32.
float gelu_tanh(float v) {
    float u = clamp(0.7978845608028654 * (v + 0.044715 * v * v * v), -15.0, 15.0);
    return 0.5 * v * (1.0 + tanh(u));
}
