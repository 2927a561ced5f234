"""Torch code printed from declarations: every step's formula and every derived gradient as
tensor operations on whole matrices (`printer`), gathered into the forward and backward
functions of a variant (`program`). This layer prints text and imports no torch; the bridge to
torch compiles and runs it (`derive.bridge.generated`: `derive.torch_function`,
`derive.torch_module`), and documents show it."""
