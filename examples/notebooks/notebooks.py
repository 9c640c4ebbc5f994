"""notebooks.py — the notebooks of examples/notebooks, made from their
sources so that they never drift: tutorial.ipynb from docs/tutorial.md (its
prose as markdown cells, each ```tfe block a code cell; the ```output and
```stderr blocks are what running the cells shows), digits.ipynb from the
cells below. Needs nbformat and nbclient, and the tfe kernel installed
(`make install-kernel`).

  python3 examples/notebooks/notebooks.py build    run them and write the .ipynb files
  python3 examples/notebooks/notebooks.py check    run them and compare with the stored ones

tests/jupyter_kernel.py runs the check (numbers with a fraction cut to two
decimals, stderr (progress bars) compared by kind only; cells tagged
"nondeterministic", those that time or profile, compare only their kinds of
output).
"""
import copy
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
VOLATILE = re.compile(r"\btime\(\)|\bprofile\(")


def code_cell(src):
    import nbformat.v4 as v4
    c = v4.new_code_cell(src)
    if VOLATILE.search(src):
        c.metadata["tags"] = ["nondeterministic"]
    return c


def new_notebook(cells):
    import nbformat.v4 as v4
    nb = v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "tfe", "display_name": "tfe", "language": "tfe"}
    nb.metadata["language_info"] = {"name": "tfe", "file_extension": ".tfe", "mimetype": "text/x-tfe"}
    for kind, text in cells:
        nb.cells.append(v4.new_markdown_cell(text) if kind == "md" else code_cell(text))
    # ids from the cell's place: the same text gives the same notebook
    for i, c in enumerate(nb.cells):
        c.id = "cell-%d" % i
    return nb


def tutorial_cells():
    """[("md"|"code", text)] of docs/tutorial.md."""
    lines = open(os.path.join(SRC, "docs", "tutorial.md"), encoding="utf-8").read().split("\n")
    cells, md, i = [], [], 0

    def flush():
        text = "\n".join(md).strip("\n")
        if text:
            cells.append(("md", text))
        md.clear()
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^```(\w*)\s*$", line)
        if m and m.group(1) in ("tfe", "output", "stderr"):
            j = i + 1
            while j < len(lines) and lines[j] != "```":
                j += 1
            if m.group(1) == "tfe":
                flush()
                cells.append(("code", "\n".join(lines[i + 1:j])))
            i = j + 1
            continue
        md.append(line)
        i += 1
    flush()
    return cells


DIGITS = [
    ("md", """# Digits: an MLP trained eagerly and staged

The UCI handwritten digits (8x8 images, `examples/data/digits.csv.gz`), a
small multilayer perceptron, and the same training step run two ways:
eagerly (op by op) and staged (traced once into a graph, then replayed).
The losses are plotted inline, the staged graph is shown before and after
the optimizer, and both loops are profiled. The interpreter stays alive
between cells: every binding made above is there below."""),
    ("code", """import nn
import optim
import losses
import metrics
import data

seed(0)
let (x, y) = data.load_digits()
let (x_train, y_train, x_test, y_test) = data.train_test_split(x, y, 0.2, seed=0)
let scaler = data.standardize(x_train)
x_train = scaler.transform(x_train)
x_test = scaler.transform(x_test)
(shape(x_train), shape(x_test))"""),
    ("md", """A model and its training step. `step` is a plain function: called
directly it runs eagerly; `staged(step)` is the same function traced into a
graph on its first call."""),
    ("code", """fn build() {
    return nn.sequential((nn.dense(64, 128, activation=relu), nn.dense(128, 10)))
}
let batch = 64
let nsteps = 60

fn trainer(model) {
    let ps = params(model)
    let opt = optim.adam(ps, lr=0.003)
    fn step(xb, yb) {
        with tape() as t {
            let loss = losses.sparse_softmax_cross_entropy(model.call(xb), yb)
        }
        opt.step(t.gradient(loss, ps))
        return loss
    }
    return step
}

fn train(step, n) {
    let out = list()
    for i in progress(range(n), label="steps") {
        let k = (i * batch) % (shape(x_train)[0] - batch)
        out.push(step(x_train[k:k + batch], y_train[k:k + batch]).item())
    }
    return out
}"""),
    ("md", "Eagerly:"),
    ("code", """seed(1)
let eager_model = build()
let eager_losses = train(trainer(eager_model), nsteps)
format("first loss {:.4f}, last {:.4f}", eager_losses[0], eager_losses[-1])"""),
    ("md", "Staged, from the same initial weights: the losses are the same, bit for bit."),
    ("code", """seed(1)
let staged_model = build()
let staged_step = staged(trainer(staged_model))
let staged_losses = train(staged_step, nsteps)
staged_losses == eager_losses"""),
    ("md", "`plot` without a path shows the chart in the notebook:"),
    ("code", """plot(nil, (eager_losses, staged_losses), labels=("eager", "staged"), title="training loss",
     xlabel="step", ylabel="loss", yscale="log")"""),
    ("md", """Test accuracy of the staged model:"""),
    ("code", """metrics.accuracy(staged_model.call(x_test), y_test)"""),
    ("md", """## The staged graph

The forward pass as a graph. `report()` says what each optimizer pass did
(here only fusion changed it), `dump("fuse")` shows the graph before and
after that pass, and the value itself, as a cell's last expression, is
drawn by Graphviz after all the passes (a fused group is a box listing its
ops)."""),
    ("code", """@staged
fn predict(xb) { return staged_model.call(xb) }
let g = graph(predict, x_test[0:4])
print(g.report())
print(g.dump("fuse"))"""),
    ("code", """g"""),
    ("md", """## Profiles

Where the time goes, eagerly and staged (`docs/profiling.md`); times vary
from run to run."""),
    ("code", """let es = trainer(eager_model)
with profile() as pe {
    for i in range(20) { es(x_train[0:batch], y_train[0:batch]) }
}
pe.table(top=6)"""),
    ("code", """staged_step(x_train[0:batch], y_train[0:batch])
with profile() as ps {
    for i in range(20) { staged_step(x_train[0:batch], y_train[0:batch]) }
}
ps.table(top=6)"""),
]


def notebooks():
    return {"tutorial.ipynb": new_notebook(tutorial_cells()), "digits.ipynb": new_notebook(DIGITS)}


def execute(nb, timeout=120):
    """Run nb (a copy) in a scratch folder with the tfe kernel."""
    from nbclient import NotebookClient
    nb = copy.deepcopy(nb)
    d = tempfile.mkdtemp(prefix="tfe-nb-")
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="tfe", allow_errors=True,
                       resources={"metadata": {"path": d}}).execute()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    for c in nb.cells:
        c.metadata.pop("execution", None)
    return nb


NUM = re.compile(r"(\d+\.\d{0,2})\d*(e[-+]?\d+)?")


def mask(text):
    """Numbers with a fraction cut to 2 decimals (the last bits of a float
    may differ with the BLAS build and its threads)."""
    return NUM.sub(lambda m: m.group(1) + "#" + (m.group(2) or ""), text)


def outputs_of(cell):
    """What a cell showed, comparable across runs."""
    tags = cell.metadata.get("tags", [])
    out = []
    for o in cell.get("outputs", []):
        t = o["output_type"]
        if t == "stream":
            # stderr is progress bars (rates and times); its kind only
            text = "" if o["name"] == "stderr" or "nondeterministic" in tags else mask(o["text"])
            if out and out[-1][:2] == ("stream", o["name"]):
                out[-1] = ("stream", o["name"], out[-1][2] + text)
            else:
                out.append(("stream", o["name"], text))
        elif t in ("execute_result", "display_data"):
            data = o["data"]
            if "text/plain" in data and "image/svg+xml" not in data and "nondeterministic" not in tags:
                out.append((t, mask(data["text/plain"])))
            else:
                out.append((t, tuple(sorted(data))))
        elif t == "error":
            out.append((t, mask(o["evalue"])))
    return out


def compare(stored, fresh):
    """Problems: sources that differ from the generated ones, outputs that differ."""
    problems = []
    if len(stored.cells) != len(fresh.cells):
        return ["%d cells stored, %d generated" % (len(stored.cells), len(fresh.cells))]
    for i, (a, b) in enumerate(zip(stored.cells, fresh.cells)):
        if a.cell_type != b.cell_type or a.source != b.source:
            problems.append("cell %d: the stored source is not the generated one (run notebooks.py build)" % i)
        elif a.cell_type == "code" and outputs_of(a) != outputs_of(b):
            problems.append("cell %d: outputs differ:\n  stored %r\n  now    %r" % (i, outputs_of(a), outputs_of(b)))
    return problems


def main(argv):
    import nbformat
    what = argv[1] if len(argv) > 1 else "check"
    bad = 0
    for name, nb in notebooks().items():
        path = os.path.join(HERE, name)
        ran = execute(nb)
        if what == "build":
            nbformat.write(ran, path)
            print("wrote", path)
            continue
        problems = compare(nbformat.read(path, as_version=4), ran)
        for p in problems:
            print("%s: %s" % (name, p))
        bad += len(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
