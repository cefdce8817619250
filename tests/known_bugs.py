"""Library bugs the tests found, each marking the cases it fails as strict xfails (pytest.mark.xfail(strict=True)):
a case that passes once its bug is fixed fails, so the mark goes with the fix."""

HARDSIGMOID_F64_GRAD = ("CPU: hardsigmoid's float64 gradient is off by float32's rounding of 1/6 (3e-8; PyTorch's is "
                        "exact), also through bias_act's and linear_act's hardsigmoid")
