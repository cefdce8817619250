"""Library bugs the tests found, each marking the cases it fails as strict xfails (pytest.mark.xfail(strict=True)):
a case that passes once its bug is fixed fails, so the mark goes with the fix."""

HARDSIGMOID_F64_GRAD = ("CPU: hardsigmoid's float64 gradient is off by float32's rounding of 1/6 (3e-8; PyTorch's is "
                        "exact), also through bias_act's and linear_act's hardsigmoid")

CPU_LONG_ROW_SUMS = ("CPU: float32 layer_norm and group_norm lose accuracy with the normalized size (4e-5 at 360K "
                     "elements against PyTorch's 1e-7): their statistics' sums are not cascaded")
