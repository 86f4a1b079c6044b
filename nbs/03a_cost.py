# %% [markdown]
# # cost
#
# > What a run cost: a price table per model (input, cached input and output per million tokens, each row with its source and date), the cost of every call from its recorded tokens, and compute seconds for in-process models.

# %%
#| default_exp cost

# %%
#| export
from __future__ import annotations
import csv, hashlib, html, io, math, re
from dataclasses import dataclass, asdict
from pathlib import Path
from madlab.core import Usage, madlab_data

# %%
from fastcore.test import *
import tempfile
from madlab.core import Transcript, Round, Turn

# %% [markdown]
# ## The price table
#
# madlab ships `data/prices.csv`: per provider and model, US dollars per million input, cached input and output tokens, with the
# pricing page each row was read from and when. A `Price` is one row; its `cost` prices one `Usage`: the prompt tokens the
# provider served from its own prompt cache (`Usage.cached_prompt_tokens`) at the cached rate (the input rate where none is known).

# %%
#| export
PRICE_COLUMNS = ("provider", "model", "input", "cached_input", "output", "source", "date")

@dataclass(frozen=True)
class Price:
    "One model's price in US dollars per million tokens, and where and when it was read."
    provider: str
    model: str
    input: float
    cached_input: float|None
    output: float
    source: str = ""
    date: str = ""

    def cost(self, usage: Usage) -> float:
        "The dollars of `usage`: fresh prompt tokens at `input`, provider-cached ones at `cached_input` (else `input`), completion tokens at `output`."
        cached = min(getattr(usage, "cached_prompt_tokens", 0) or 0, usage.prompt_tokens)
        rate = self.input if self.cached_input is None else self.cached_input
        return ((usage.prompt_tokens - cached) * self.input + cached * rate + usage.completion_tokens * self.output) / 1e6

# %% [markdown]
# A million fresh prompt tokens of gpt-4o-mini cost its input price; cached ones cost the cached price:

# %%
p = Price("openai", "gpt-4o-mini", 0.15, 0.075, 0.60)
test_close(p.cost(Usage(1_000_000, 0, 1)), 0.15)
test_close(p.cost(Usage(1000, 200, 1, cached_prompt_tokens=400)), (600 * 0.15 + 400 * 0.075 + 200 * 0.60) / 1e6)
test_close(Price("qwen", "qwen-plus", 0.4, None, 1.2).cost(Usage(1000, 0, 1, cached_prompt_tokens=1000)), 0.4e-3)

# %% [markdown]
# `read_prices` reads a table (CSV, `#` lines are comments). A bad file is a `ValueError` that names the file, the row and the column.

# %%
#| export
def _number(v: str, where: str, col: str, empty_ok: bool = False) -> float|None:
    "A price cell: a finite number >= 0 (empty: None where `empty_ok`); else a ValueError naming `where` and `col`."
    v = (v or "").strip()
    if not v and empty_ok: return None
    try: x = float(v)
    except ValueError: x = math.nan
    if not math.isfinite(x) or x < 0: raise ValueError(f"{where}, column {col}: {v!r} is not a price (a number >= 0, US dollars per million tokens)")
    return x

def read_prices(path) -> "Prices":
    "The price table in CSV file `path` (columns `PRICE_COLUMNS`; `cached_input`, `source` and `date` may be empty)."
    path = Path(path)
    try: text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e: raise ValueError(f"{path}: cannot read the price table ({getattr(e, 'strerror', None) or e})") from None
    lines = [(n, l) for n, l in enumerate(text.splitlines(), 1) if l.strip() and not l.lstrip().startswith("#")]
    rows = list(csv.reader([l for _, l in lines]))
    if not rows: raise ValueError(f"{path}: empty price table; its header must be {','.join(PRICE_COLUMNS)}")
    head = [h.strip() for h in rows[0]]
    missing = [c for c in ("provider", "model", "input", "output") if c not in head]
    if missing: raise ValueError(f"{path}, line {lines[0][0]}: no column {', '.join(missing)}; the header must be {','.join(PRICE_COLUMNS)}")
    out = []
    for (n, _), r in zip(lines[1:], rows[1:]):
        where = f"{path}, row {n}"
        if len(r) != len(head): raise ValueError(f"{where}: {len(r)} cells for {len(head)} columns ({','.join(head)})")
        d = dict(zip(head, (c.strip() for c in r)))
        for c in ("provider", "model"):
            if not d[c]: raise ValueError(f"{where}, column {c}: empty")
        out.append(Price(d["provider"].lower(), d["model"], _number(d["input"], where, "input"), _number(d.get("cached_input", ""), where, "cached_input", True),
                         _number(d["output"], where, "output"), d.get("source", ""), d.get("date", "")))
    return Prices(out, str(path), hashlib.sha256(text.encode()).hexdigest())

# %% [markdown]
# `Prices` is a table of them. `for_model` finds a spec's row: the provider is the spec's prefix (`openai:`, `gemini:`, `qwen:`), the model
# its name, with a dated or versioned name (`gpt-4o-mini-2024-07-18`, `qwen-plus-2025-01-25`, `gemini-2.0-flash-001`, `-latest`) matching its
# model's row; options after a comma are ignored. `record()` is what a run folder's `config.json` keeps, and `Prices.from_record` reads it back.

# %%
#| export
_DATED = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-\d{4}|-\d{3}|-latest)$")

def _model_names(name: str) -> list[str]:
    "The names a model is looked up by: itself, then without its date or version suffix (lower case)."
    name = name.strip().lower().removeprefix("models/")
    out = [name]
    while (m := _DATED.search(out[-1])) and m.start() > 0: out.append(out[-1][: m.start()])
    return out

class Prices:
    "A price table: `for_model(spec)` gives a spec's `Price` (None: no price), `cost(spec, usage)` its dollars."
    def __init__(self, rows, path: str|None = None, sha256: str|None = None):
        self.rows, self.path, self.sha256 = list(rows), path, sha256
        self._by = {(r.provider, _model_names(r.model)[0]): r for r in self.rows}

    def for_model(self, spec: str) -> Price|None:
        "The price of backend spec `spec` (`provider:model[,options]`), or None."
        if not isinstance(spec, str) or ":" not in spec: return None
        provider, rest = spec.split(":", 1)
        for name in _model_names(rest.split(",", 1)[0]):
            if (r := self._by.get((provider.lower(), name))) is not None: return r
        return None

    def cost(self, spec: str, usage: Usage) -> float|None:
        "The dollars of `usage` on `spec`'s model (None: no price)."
        p = self.for_model(spec)
        return None if p is None else p.cost(usage)

    def __len__(self): return len(self.rows)
    def record(self) -> dict: return {"path": self.path, "sha256": self.sha256, "rows": [asdict(r) for r in self.rows]}
    @classmethod
    def from_record(cls, d: dict) -> "Prices": return cls([Price(**r) for r in d.get("rows") or []], d.get("path"), d.get("sha256"))
    def __repr__(self): return f"Prices({len(self.rows)} models from {self.path or 'memory'})"

# %% [markdown]
# A table renders as a table in a notebook:

# %%
#| export
from fastcore.basics import patch

@patch
def _repr_html_(self: Prices) -> str:
    cols = ("provider", "model", "input", "cached_input", "output", "source", "date")
    cell = lambda v: "" if v is None else html.escape(str(v))
    body = "".join("<tr>" + "".join(f"<td>{cell(getattr(r, c))}</td>" for c in cols) + "</tr>" for r in self.rows)
    return (f"<div class='madlab-prices'><small>US dollars per million tokens · {html.escape(str(self.path or 'in memory'))}</small>"
            f"<table><tr>{''.join(f'<th>{c}</th>' for c in cols)}</tr>{body}</table></div>")

# %% [markdown]
# `load_prices` is what every `prices=` argument goes through: None is madlab's own table, a path is read, a `Prices` or a recorded table is taken as it is.

# %%
#| export
def load_prices(prices=None) -> Prices:
    "The price table `prices` names: None (madlab's `data/prices.csv`), a CSV path, a `Prices`, or a `Prices.record()`."
    if isinstance(prices, Prices): return prices
    if prices is None: return read_prices(madlab_data("prices.csv"))
    if isinstance(prices, dict): return Prices.from_record(prices)
    if isinstance(prices, (str, Path)): return read_prices(prices)
    raise TypeError(f"prices must be a CSV path, a Prices table or None; got {type(prices).__name__}")

# %%
P = load_prices()
assert len(P) >= 15 and all(r.source.startswith("https://") and r.date for r in P.rows)
test_eq(P.for_model("openai:gpt-4o-mini-2024-07-18").model, "gpt-4o-mini")
test_eq(P.for_model("openai:gpt-4o-2024-08-06").model, "gpt-4o")
test_eq(P.for_model("gemini:gemini-2.0-flash-001").model, "gemini-2.0-flash")
test_eq(P.for_model("qwen:qwen-plus-2025-01-25,temperature=0").model, "qwen-plus")
for s in ("openai:gpt-4o-mini-tts", "synthetic:strong", "hf:/models/x", "vllm:gpt-4o", "gpt-4o"): test_eq(P.for_model(s), None)
test_eq(Prices.from_record(P.record()).for_model("openai:o3").output, P.for_model("openai:o3").output)
assert "gpt-4o-mini" in P._repr_html_()

# %%
#| hide
# a bad table names the file, the row and the column
with tempfile.TemporaryDirectory() as d:
    f = Path(d) / "p.csv"
    for text, said in [("provider,model,input,cached_input,output\nopenai,m,1,,x\n", "row 2, column output: 'x'"),
                       ("# c\nprovider,model,input,output\nopenai,m,-1,2\n", "row 3, column input"),
                       ("provider,model,input,output\nopenai,,1,2\n", "row 2, column model: empty"),
                       ("provider,model,input,output\nopenai,m,1\n", "row 2: 3 cells for 4 columns"),
                       ("provider,model,price\n", "no column input, output"), ("", "empty price table"),
                       ("provider,model,input,output\nopenai,m,nan,2\n", "column input: 'nan'")]:
        f.write_text(text)
        with ExceptionExpected(ValueError, said): read_prices(f)
        try: read_prices(f)
        except ValueError as e: assert str(e).startswith(str(f)), e
    with ExceptionExpected(ValueError, "cannot read"): read_prices(Path(d) / "none.csv")

# %% [markdown]
# ## What a debate cost
#
# A turn's model is its agent's spec in the transcript's team. A reply served from madlab's own response cache (or replayed) costs
# nothing now: `cached_cost` says what it would have cost. `hf:` models have no price: their turns record `compute_seconds`, their share of
# the batch's generate time. Synthetic, replayed and imported agents make no paid call.

# %%
#| export
FREE_KINDS = ("synthetic", "replay", "imported")     # agents that make no paid call: never listed as unpriced
LOCAL_KINDS = ("hf",)                                # in-process models: compute seconds instead of a price

def _kind(spec) -> str: return str(spec).split(":", 1)[0] if spec else ""

def turn_costs(t, prices: Prices) -> list[dict]:
    "One row per answered turn of transcript `t`: item, agent, spec, calls, cached, tokens, `cost` (None: no price), `cached_cost`, `compute_seconds`."
    specs = {a.get("name"): a.get("spec") for a in (t.team or []) if isinstance(a, dict)}
    out = []
    for r in t.rounds:
        for tu in r.turns:
            if tu.error is not None: continue
            spec, u = specs.get(tu.agent), tu.usage
            dollars = prices.cost(spec, u) if spec else None
            out.append({"item_id": str(t.meta.get("id")), "agent": tu.agent, "spec": spec, "phase": r.phase, "calls": 0 if tu.cached else u.calls,
                        "cached_calls": int(bool(tu.cached)), "prompt_tokens": u.prompt_tokens, "cached_prompt_tokens": getattr(u, "cached_prompt_tokens", 0),
                        "completion_tokens": u.completion_tokens, "cost": None if dollars is None else (0.0 if tu.cached else dollars),
                        "cached_cost": None if dollars is None else (dollars if tu.cached else 0.0),
                        "compute_seconds": None if tu.cached else (tu.meta or {}).get("compute_seconds")})
    return out

# %% [markdown]
# `item_cost` is what a debate adds to its results row: `cost` (None when no model of it has a price), `cached_cost`, and `compute_seconds` where an `hf:` model answered.

# %%
#| export
def _sum(xs):
    "The sum of the values that are not None (None when all are)."
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return round(sum(xs), 10) if xs else None

def item_cost(t, prices: Prices) -> dict:
    "The cost columns of transcript `t`'s results row."
    rows = turn_costs(t, prices)
    out = {"cost": _sum(r["cost"] for r in rows), "cached_cost": _sum(r["cached_cost"] for r in rows)}
    cs = _sum(r["compute_seconds"] for r in rows)
    if cs is not None: out["compute_seconds"] = round(cs, 4)
    return out

# %% [markdown]
# A debate of two agents, one priced and one synthetic, and one of its replies from the cache:

# %%
def _t(turns, team):
    t = Transcript(protocol="x", rounds=[Round("r0", "initial", 0, turns)], team=team)
    t.meta["id"] = "q1"
    return t
team = [{"name": "A", "spec": "openai:gpt-4o-mini"}, {"name": "B", "spec": "synthetic:strong"}]
t = _t([Turn("A", usage=Usage(1000, 100, 1, cached_prompt_tokens=200)), Turn("A", usage=Usage(500, 50, 1), cached=True),
        Turn("B", usage=Usage(300, 30, 1))], team)
c = item_cost(t, P)
test_close(c["cost"], (800 * 0.15 + 200 * 0.075 + 100 * 0.6) / 1e6)
test_close(c["cached_cost"], (500 * 0.15 + 50 * 0.6) / 1e6)
assert "compute_seconds" not in c
test_eq(item_cost(_t([Turn("B", usage=Usage(300, 30, 1))], team), P), {"cost": None, "cached_cost": None})

# %% [markdown]
# `cost_table` sums the turns of many transcripts by item, agent (with its spec), or both; `by=()` is the whole run.

# %%
#| export
_COUNT_COLS = ("calls", "cached_calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens")

def cost_table(transcripts, prices=None, by=("agent",)) -> "pd.DataFrame":
    "Calls, tokens, `cost`, `cached_cost` and `compute_seconds` of `transcripts` (a list or a dict of them) summed by `by` (columns of `turn_costs`: item_id, agent, spec, phase)."
    import pandas as pd
    prices = load_prices(prices)
    ts = list(transcripts.values()) if isinstance(transcripts, dict) else list(transcripts)
    by = [by] if isinstance(by, str) else list(by)
    if "agent" in by and "spec" not in by: by.append("spec")
    df = pd.DataFrame([r for t in ts for r in turn_costs(t, prices)], columns=["item_id", "agent", "spec", "phase", *_COUNT_COLS, "cost", "cached_cost", "compute_seconds"])
    df["spec"] = df.spec.fillna("?")
    agg = {c: "sum" for c in _COUNT_COLS} | {c: (lambda s: _sum(s)) for c in ("cost", "cached_cost", "compute_seconds")}
    out = df.groupby(by, sort=False, dropna=False).agg(agg).reset_index() if by else df.agg(agg).to_frame().T
    out["tokens"] = out.prompt_tokens + out.completion_tokens
    return out

# %%
ct = cost_table([t], P)
test_eq(list(ct.agent), ["A", "B"])
test_close(ct.cost[0], c["cost"]); assert ct.cost[1] is None or math.isnan(ct.cost[1])
test_eq(list(ct.tokens), [1650, 330])
test_eq(int(cost_table([t], P, by=()).calls[0]), 2)

# %% [markdown]
# `cost_lines` is what a run's summary says about cost: the total with the cached replies' share, the models without a price (once, by name), and the compute seconds of `hf:` models.

# %%
#| export
def usd(x) -> str:
    "Dollars as a reader wants them: cents from a dollar up, six decimals below."
    return f"${x:,.2f}" if x >= 1 else f"${x:.6f}"

def unpriced(specs, prices: Prices) -> list[str]:
    "The specs among `specs` that have no price and make paid calls (not synthetic, replayed, imported or in-process)."
    return sorted({str(s).split(",", 1)[0] for s in specs if s and _kind(s) not in FREE_KINDS + LOCAL_KINDS and prices.for_model(s) is None})

def cost_lines(df, specs, prices: Prices) -> list[str]:
    "The summary's lines about cost, from the results table `df` (its `cost`, `cached_cost`, `compute_seconds` columns) and the team's `specs`."
    L, col = [], lambda c: _sum(df[c]) if c in df else None
    cost, cached, hits = col("cost"), col("cached_cost"), int(df.cached_calls.fillna(0).sum()) if "cached_calls" in df else 0
    if cost is not None:
        L.append(f"cost: {usd(cost)} at the prices of {Path(prices.path).name if prices.path else 'the table given'}"
                 + (f"; {hits} replies from madlab's cache cost nothing now (they would have cost {usd(cached)})" if hits and cached else ""))
    missing = unpriced(specs, prices)
    if missing: L.append(f"no price for {', '.join(missing)}: tokens only (give a price table with --prices FILE)")
    secs = col("compute_seconds")
    if secs is not None: L.append(f"compute: {secs:.2f} s of generate on in-process models ({', '.join(sorted({str(s).split(',', 1)[0] for s in specs if _kind(s) in LOCAL_KINDS}))})")
    return L

# %%
import pandas as pd
df = pd.DataFrame([{"item_id": "q1", "cached_calls": 1, **c}])
L = cost_lines(df, ["openai:gpt-4o-mini", "synthetic:strong", "openai:my-finetune", "openai:my-finetune"], P)
test_eq(L[0], f"cost: {usd(c['cost'])} at the prices of prices.csv; 1 replies from madlab's cache cost nothing now (they would have cost {usd(c['cached_cost'])})")
test_eq(L[1], "no price for openai:my-finetune: tokens only (give a price table with --prices FILE)")
test_eq(cost_lines(pd.DataFrame([{"cost": None}]), ["synthetic:strong"], P), [])
test_eq(usd(1234.5), "$1,234.50")
