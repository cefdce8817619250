"""Library bugs the tests found, each marking the cases it fails as strict xfails (pytest.mark.xfail(strict=True)):
a case that passes once its bug is fixed fails, so the mark goes with the fix."""
