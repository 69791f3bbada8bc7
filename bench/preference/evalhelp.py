from rlvr.config.data import BuiltinArithmetic
from rlvr.data.sources import load_task_source
from rlvr.models.load import load_pretrained
from rlvr.monitoring.evaluate import default_judge, evaluate
from rlvr.rollout.hf_engine import HFEngine


def heldout_eval(path):
    m, tok = load_pretrained(path)
    tasks = load_task_source(BuiltinArithmetic(families=["mul21"], n=76, split="heldout", seed=1234))
    uniq = list({t.prompt: t for t in tasks}.values())
    r = evaluate(HFEngine(m, tok), tok, uniq, default_judge(0), k=1, max_new_tokens=64)
    return {"unique": len(uniq), "pass_at_1_unique": r["pass_at_1"], "mean_length": r["mean_length"]}
