"""``rlvr probe template MODEL_DIR``: does the model's chat template round-trip a multi-turn
conversation token for token?

The closed loop builds a trajectory as prompt ids + sampled ids + observation ids + ... (token-in,
token-out, :mod:`rlvr.rollout.multiturn`). That sequence should equal the template's rendering of the
same conversation, or the policy is trained on contexts its template never produces. The probe renders
a conversation (user, assistant with reasoning and a tool call, tool output, assistant answer) both
ways and reports where they part, with the usual culprits named: the frame around tool messages
(missing newline after an end-of-turn token), dropped tool calls, reasoning stripped from earlier
turns (history rewriting: such trajectories are split into several training samples with
``rollout.loop.history: template``), and BPE merges across a turn boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr.rollout.multiturn import TemplateError, TurnTemplate

REASONING = "<think>add the two numbers</think>"
CALL = '<tool>{"name":"add","args":{"a":2,"b":3}}</tool>'
CONVERSATION = [
    {"role": "user", "content": "What is 2+3? Use the tools."},
    {"role": "assistant", "content": REASONING + CALL},
    {"role": "tool", "content": "<tool_output>5</tool_output>"},
    {"role": "assistant", "content": "<think>the tool said 5</think>5"},
]


@dataclass
class TemplateReport:
    """What the probe found; ``ok`` when the incremental ids equal the rendered conversation's."""

    ok: bool
    issues: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    frame: tuple[str, str] | None = None
    mismatch_at: int | None = None
    rendered: str = ""
    incremental: str = ""


def _window(tok, ids: list[int], at: int) -> str:
    return tok.decode(ids[max(0, at - 24):at + 24])


def probe_template(tokenizer, tool_role: str = "tool") -> TemplateReport:
    """Compare the closed loop's incremental ids with the template's rendering (module docstring)."""
    conv = [dict(m, role=tool_role) if m["role"] == "tool" else m for m in CONVERSATION]
    if not getattr(tokenizer, "chat_template", None):
        return TemplateReport(False, ["the tokenizer has no chat template: observations are framed by newlines"])
    try:
        tmpl = TurnTemplate(tokenizer, tool_role)
    except TemplateError as e:
        return TemplateReport(False, [str(e)])
    ids = tmpl.render_ids(conv[:1])
    ids += tmpl.encode(conv[1]["content"]) + [tmpl.eot_id]
    ids += tmpl.observation_ids(conv[2]["content"])
    ids += tmpl.encode(conv[3]["content"]) + [tmpl.eot_id]
    text = tokenizer.apply_chat_template(conv, tokenize=False)
    full = tmpl.encode(text)
    report = TemplateReport(True, frame=(tmpl.pre, tmpl.post), rendered=text, incremental=tokenizer.decode(ids))
    if CALL not in text:
        report.issues.append("the template drops tool calls from assistant messages")
    if REASONING not in text:
        report.issues.append("the template strips reasoning from earlier assistant turns (it rewrites history: "
                             "train with rollout.loop.history: template, which splits such trajectories)")
    if "5</tool_output>" not in text:
        report.issues.append(f"the template drops {tool_role!r} messages")
    n = next((i for i, (a, b) in enumerate(zip(ids, full)) if a != b), None)
    if n is None and len(full) < len(ids):
        n = len(full)
    if n is not None:
        report.mismatch_at = n
        report.issues.append(f"token {n} differs: incremental ...{_window(tokenizer, ids, n)!r}... vs rendered "
                             f"...{_window(tokenizer, full, n)!r}...")
    elif len(full) > len(ids):
        report.notes.append(f"the rendering ends with {tokenizer.decode(full[len(ids):])!r} after the last "
                            f"end-of-turn token (never sampled; harmless)")
    if "\n" in tmpl.pre[:2]:
        report.notes.append("the template writes a newline after the end-of-turn token: it is part of the "
                            "observation ids (loss_mask 0), as it must be")
    pieces = tmpl.encode(conv[1]["content"]) + [tmpl.eot_id] + tmpl.observation_ids(conv[2]["content"])
    joined = tmpl.encode(conv[1]["content"] + tokenizer.convert_ids_to_tokens(tmpl.eot_id) + tmpl.pre
                         + conv[2]["content"] + tmpl.post)
    if pieces != joined:
        report.notes.append("the tokenizer merges differently across a turn boundary than inside one text "
                            "(token-in/token-out keeps the sampled ids; re-encoding the text would not)")
    report.ok = not report.issues
    return report
