"""A research lab for multi-agent LLM debate, used from JupyterLab

Modules:

- `madlab.attribute`: LLM failure attributors graded against blame: a judge reads a failed debate and names the agent and the turn that caused the wrong decision, by Who&When's three methods (all at once, step by step, binary search); optionally MAST's failure modes; each answer compared with blame's causal one (the turns whose replacement flips the decision), with 95 % intervals; and an importer for logs in Who&When's layout."""

__version__ = "0.1.0"
