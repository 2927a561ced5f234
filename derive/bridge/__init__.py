"""The bridge to torch: the one evaluator of a graph, step by step, by each step's twin
(`evaluate`), the entry's own entry points (`twins`), `derive check` (`check`), the worked
example. With `derive.conformance`, its wing beside it, the only part of `derive` that imports
torch, at the top of its modules like any module: nothing below them imports either, and
`import derive` loads them only when a name from them is used."""
