"""Chat templating and tokenisation of prompts and completions (prompt tokens are never trained on)."""

from __future__ import annotations

from rlvr.data.types import Task

END_TOKENS = ("<|end|>", "<|im_end|>", "<|eot_id|>", "<end_of_turn>")


def stop_token_ids(tokenizer) -> list[int]:
    """Token ids that end an assistant turn: eos plus the template's end-of-turn token if any."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    vocab = tokenizer.get_vocab()
    ids += [vocab[t] for t in END_TOKENS if t in vocab and vocab[t] not in ids]
    return ids


def end_of_turn_id(tokenizer) -> int:
    """The token appended after a demonstration's completion (end-of-turn token, else eos)."""
    vocab = tokenizer.get_vocab()
    for t in END_TOKENS:
        if t in vocab:
            return vocab[t]
    return tokenizer.eos_token_id


def prompt_text(tokenizer, task: Task) -> str:
    """The rendered prompt (chat template with the generation prompt)."""
    msgs = task.policy_messages()
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return "\n".join(m["content"] for m in msgs) + "\n"


def encode_prompt(tokenizer, task: Task) -> list[int]:
    return tokenizer(prompt_text(tokenizer, task), add_special_tokens=False)["input_ids"]


def encode_completion(tokenizer, completion: str, add_end: bool = True) -> list[int]:
    ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    return ids + [end_of_turn_id(tokenizer)] if add_end else ids


def encode_example(tokenizer, task: Task, completion: str):
    """``(input_ids, loss_mask)`` for prompt + completion, whole; loss_mask is 1 on completion tokens only."""
    p = encode_prompt(tokenizer, task)
    c = encode_completion(tokenizer, completion)
    return p + c, [0] * len(p) + [1] * len(c)


def solution_example(tokenizer, task: Task, what: str = "SFT") -> tuple[list[int], list[int]]:
    """``(input_ids, loss_mask)`` of the task's demonstration, whole; a task without one is an error naming it."""
    from rlvr.errors import DataError

    if not task.solution:
        raise DataError(f"{what} task {task.id!r} has no demonstration ('completion', 'solution', or a final "
                        "assistant turn in 'messages')")
    return encode_example(tokenizer, task, task.solution)


def encode_demos(tasks, tokenizer, max_length: int, what: str = "SFT") -> list[tuple[list[int], list[int]]]:
    """``(input_ids, loss_mask)`` of each task's demonstration, cut to ``max_length`` (:func:`cut_demos`)."""
    tasks = list(tasks)
    return cut_demos([solution_example(tokenizer, t, what) for t in tasks], tasks, max_length, what)


def cut_demos(examples: list, tasks: list, max_length: int, what: str) -> list[tuple[list[int], list[int]]]:
    """The demonstrations cut to their first ``max_length`` tokens (:func:`demo_cuts`): one that keeps no completion
    token is an error (it would train on nothing), those that lose the end of their completion are a warning."""
    from rlvr.errors import DataError

    out, error, warning = demo_cuts(examples, tasks, max_length, what)
    if error:
        raise DataError(error)
    if warning:
        import sys

        print(f"warning: {warning}", file=sys.stderr, flush=True)
    return out


def demo_cuts(examples: list, tasks: list, max_length: int,
              what: str) -> tuple[list[tuple[list[int], list[int]]], str | None, str | None]:
    """``(cut, error, warning)``: the demonstrations cut to their first ``max_length`` tokens; the error when some
    keep no completion token (how many, the longest, the length that fits them all), the warning when some lose
    the end of their completion (their last tokens, the end of sequence with them); each None when there is none."""
    empty, short, longest = 0, 0, (0, None)
    out = []
    for (ids, mask), t in zip(examples, tasks):
        cut_ids, cut_mask = ids[:max_length], mask[:max_length]
        if len(ids) > longest[0]:
            longest = (len(ids), t)
        if sum(mask) and not sum(cut_mask):
            empty += 1
        elif sum(cut_mask) < sum(mask):
            short += 1
        out.append((cut_ids, cut_mask))
    where = f"{what}: max_length {max_length}"
    fits = f"the longest is {longest[0]} tokens (task {getattr(longest[1], 'id', '?')!r}): raise max_length to fit"
    error = (f"{where}: {empty} of {len(out)} demonstrations keep no completion token (their prompt fills the "
             f"length), so they would train on nothing; {fits}") if empty else None
    warning = (f"{where}: {short} of {len(out)} demonstrations lose the end of their completion (the model never "
               f"sees it finish); {fits}") if short else None
    return out, error, warning


def check_prompt_lengths(tasks, tokenizer, model, max_new_tokens: int, where: str) -> None:
    """Refuse, before anything is generated, tasks whose prompt plus ``max_new_tokens`` does not fit the
    model's positions (``config.max_position_embeddings``; no such field: nothing to check). Past its
    positions a RoPE model still runs -- on positions it never saw -- so the damage would be silent."""
    from rlvr.errors import DataError

    max_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not max_pos:
        return
    texts = [prompt_text(tokenizer, t) for t in tasks]
    lens = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []
    over = [(t, n) for t, n in zip(tasks, lens) if n + max_new_tokens > max_pos]
    if over:
        t, n = max(over, key=lambda x: x[1])
        raise DataError(f"{where}: {len(over)} of {len(tasks)} prompts do not fit the model's {max_pos} positions "
                        f"with max_new_tokens = {max_new_tokens}: the longest, task {t.id!r}, is {n} tokens "
                        f"(fits: prompt <= {max_pos - max_new_tokens}). Lower max_new_tokens or drop those tasks")
