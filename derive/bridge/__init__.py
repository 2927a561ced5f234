"""The bridge to torch: the one evaluator of a graph, step by step, by each step's twin
(`evaluate`), the entry's own entry points (`twins`), `derive check` (`check`), the worked
example, `derive conform`. The only part of `derive` that imports torch, at the top of its
modules like any module: nothing below it imports the bridge, and `import derive` loads it only
when a name from it is used."""
