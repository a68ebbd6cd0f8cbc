"""Run a tools/nbsrc notebook source cell by cell in one namespace; print each cell's time and error."""
import faulthandler, re, sys, time, traceback
faulthandler.enable()
src = open(sys.argv[1]).read().split("\n# %%")
skip = re.compile(sys.argv[2]) if len(sys.argv) > 2 else None
ns = {"__name__": "__main__"}
for i, cell in enumerate(src):
    if cell.lstrip().startswith("[markdown]"):
        continue
    if skip and skip.search(cell):
        print(f"#### cell {i} skipped", flush=True); continue
    faulthandler.dump_traceback_later(100, repeat=True)
    t = time.perf_counter()
    try:
        exec(compile("# %%" + cell, f"cell{i}", "exec"), ns)
        err = ""
    except BaseException:
        err = traceback.format_exc()[-3000:]
    faulthandler.cancel_dump_traceback_later()
    print(f"#### cell {i} ({cell.splitlines()[0][:40]!r}): {time.perf_counter()-t:.1f} s {err}", flush=True)
