"""Training-health rules (``rlvr.monitoring.health``): their thresholds, and what each status does.

Every threshold says where its default comes from. "The seed table" is a reference entropy-collapse panel
(step / pass rate / entropy / KL / status: 1.83 nats healthy, 1.51 healthy,
1.02 "entropy trending down", 0.48 "ENTROPY COLLAPSE", 0.11 with KL 0.19 -> 0.28 -> 0.44 "stalled + KL
drifting"); "the screening paper" is arXiv:2606.18487 (expected group
advantage variance p(1-p)(G-1)/G, threshold p*(G), p*(8) = 0.083).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Section

Action = Literal["alert", "entropy_bonus", "entropy_floor", "raise_temperature", "adaptive_beta", "grow_group",
                 "dynamic_sampling", "stop"]
"""What a status can do: ``alert`` (print + log only); ``entropy_bonus`` (raise the entropy coefficient by
``entropy_bonus_step``); ``entropy_floor`` (an entropy target at ``entropy_trend_frac`` × the starting
entropy: from then on the entropy coefficient rises by ``entropy_bonus_step`` each step the smoothed
entropy is under it and falls back when above — adaptive entropy control); ``raise_temperature`` (+
``temperature_step``); ``adaptive_beta`` (multiply β by ``beta_factor``, or start it at ``beta_start``);
``grow_group`` (G × 2); ``dynamic_sampling`` (turn on DAPO's dynamic sampling on correctness); ``stop``
(end the stage and ship the last healthy checkpoint as its result)."""


class HealthActions(Section):
    """The actions each status takes (a list; every entry is logged in ``health/action`` with its reason).
    Knob actions (entropy, temperature, β, G, dynamic sampling) act in RL stages; in a stage without that
    knob (PPO, preference) they are logged as alerts saying so."""

    not_training: list[Action] = ["alert"]
    """Nothing trained for a whole window (every group zero-variance, or no sequence updated)."""
    entropy_trending_down: list[Action] = ["alert"]
    """Entropy below ``entropy_trend_frac`` of its start and still falling."""
    entropy_collapse: list[Action] = ["alert"]
    """Entropy below ``entropy_collapse_frac`` of its start (try ``[entropy_floor]`` or ``[raise_temperature]``)."""
    stalled: list[Action] = ["alert"]
    """Pass rate flat for ``stall_steps`` steps."""
    kl_drift: list[Action] = ["alert"]
    """KL to the reference above ``kl_max`` or accelerating (try ``[adaptive_beta]``)."""
    dead_groups: list[Action] = ["alert"]
    """Zero-variance groups above ``dead_frac`` (try ``[dynamic_sampling]`` or ``[grow_group]``)."""
    verifier_overfit: list[Action] = ["alert"]
    """Train pass rate rising while held-out falls (try ``[stop]``)."""
    preference_drop: list[Action] = ["alert"]
    """(preference stages) Training loss falling while held-out preference accuracy falls (try ``[stop]``)."""
    length_blowup: list[Action] = ["alert"]
    """Truncation rate or mean length rising."""
    reward_length_corr: list[Action] = ["alert"]
    """Reward correlated with length while lengths grow."""
    nan: list[Action] = ["alert"]
    """A NaN/inf loss or gradient norm."""
    tool_collapse: list[Action] = ["alert"]
    """(multi-turn) tool calls falling while success stalls."""
    env_leak: list[Action] = ["alert"]
    """(multi-turn) a secret goal value seen in an observation."""


class CodeTestSplit(Section):
    """Held-out checks and verifier rotation for code and SQL tasks (``rlvr.verifiers.heldout_split``)."""

    heldout_frac: float = Field(0.3, ge=0, lt=1)
    """Share of each code task's list-shaped tests (asserts or stdin/stdout cases), and of each SQL task's
    database variants, that the training verifier never sees (at least one, never all; a task with fewer
    than two is left whole); every step the completions that pass the training checks are also run on the
    held-out ones (``verifier/overfit_frac``: pass the training checks, fail the held-out ones). On by
    default in single-turn RL stages (its cost: one more verifier run for each passing sample of a split
    task; docs/health.md); 0: off."""
    twin_every: int = Field(4, ge=0)
    """Math tasks from a built-in generator: every this many steps, one sample of each of the step's tasks
    regenerated with other numbers (a held-out problem of the same family) at the rollout's sampling
    settings; ``verifier/twin_gap`` = the step's training pass rate on those tasks minus the twins' (one more
    sample per task every 4 steps: ~3% of a G = 8 rollout). 0: off."""
    rotate_every: int = Field(0, ge=0)
    """Verifier rotation: every this many steps the training verifier uses a new random subset of the
    training pool (0: the whole pool every step)."""
    rotate_frac: float = Field(0.5, gt=0, le=1)
    """Verifier rotation: the share of the training pool each subset holds."""


class HealthConfig(Section):
    """Health monitor of a stage with a policy (RL, PPO, preference): statuses from smoothed metric
    histories, and the actions they take."""

    window: int = Field(10, ge=1)
    """Steps of the starting baseline, and the smoothing span: every rule reads an EMA with
    α = 2 / (window + 1) (the EMA whose centre of mass is a window's simple mean), so one noisy step does
    not flip a status. 10: a tenth of a typical 100-200-step tiny RL stage."""
    entropy_trend_frac: float = 0.6
    """entropy_trending_down: smoothed entropy below this fraction of the starting entropy and still
    falling. The seed table: 1.51/1.83 = 0.83 is healthy, 1.02/1.83 = 0.56 is trending down."""
    entropy_collapse_frac: float = 0.3
    """entropy_collapse: smoothed entropy below this fraction of the starting entropy. The seed table:
    0.48/1.83 = 0.26 is ENTROPY COLLAPSE, 0.56 is not."""
    solved_pass_rate: float = Field(1.0, ge=0.0, le=1.0)
    """entropy_collapse / entropy_trending_down stay quiet while the smoothed training pass rate is at or
    above this (1.0, the default: never). Below 1 it treats a low entropy on a solved training set as
    convergence rather than collapse -- e.g. 0.95: with G = 8 at p = 0.95, 66% of the groups are all-pass
    already (p^G), so the stage is mostly spending rollouts on solved tasks. Off by default because the
    seeds count a policy that turns deterministic as collapsed whatever its training pass rate (it stops
    exploring and generalises worse), and a collapse on an easy task is often fastest to show up exactly
    as the pass rate saturates; measured: the entropy-floor runs of bench/entropy_floor.py are flagged
    ENTROPY COLLAPSE at a 0.96-0.99 training pass rate after solving their task, which 0.95 silences
    (docs/health.md)."""
    heldout_solved: float = Field(0.98, ge=0.0, le=1.0)
    """entropy_collapse / entropy_trending_down stay quiet once the stage's best held-out pass@1 is at or above
    this (and its latest within ``stall_delta`` of it): a task solved on problems the policy never trains on
    has no headroom for a collapse to cost, so a falling entropy there is convergence (the agent recipe: held-out
    25% -> 99.8% while the sampled entropy fell to 29% of its start). 0.98: a 2-point headroom, about two
    standard errors of a 400-problem held-out set at p = 0.96; a plateau below it still reads as collapse.
    (While held-out keeps setting new highs above its first evaluation the entropy rules are quiet too.)"""
    stall_steps: int = Field(30, ge=1)
    """stalled: the smoothed pass rate moved by less than ``stall_delta`` over this many steps, and held-out
    pass@1 (once evaluated twice) is not above its step-0 figure beyond its noise (3 windows:
    long enough that the EMA's lag and per-step noise do not look like a plateau)."""
    stall_delta: float = 0.02
    """stalled: see ``stall_steps``. 0.02: about one standard error of the pass rate of a 128-sample
    rollout batch at p = 0.5 (0.044) halved by the EMA's averaging."""
    kl_max: float = 0.5
    """kl_drift: smoothed per-token KL to the reference above this. The seed: "for a 7B base, 0.5 nats a
    token is a decent early warning"."""
    kl_accel_min: float = 0.2
    """kl_drift (accelerating): the smoothed KL is above this and grew over the last window by more than
    ``kl_accel_ratio`` × its growth over the window before. The seed table: 0.19 is not drifting yet; 0.28 ->
    0.44 (+0.16 after +0.09: 1.8×) is."""
    kl_accel_ratio: float = 1.5
    """kl_drift: see ``kl_accel_min`` (the seed table's healthy rise 0.11 -> 0.19 -> 0.28 is 1.1×)."""
    track_kl: bool | None = None
    """KL to the reference (``kl/ref``) at β = 0. True: on every row every step (a reference forward per step,
    no gradient). None (default): on ``kl_rows`` rows every ``kl_every`` steps (a bounded cost), or on every
    row every step when an ``adaptive_beta`` action is configured (it needs the KL and the reference).
    False: not measured (no reference model is loaded). At β > 0 the loss measures it on every row anyway."""
    kl_every: int = Field(4, ge=1)
    """Sampled KL (β = 0, ``track_kl`` unset): measure ``kl/ref`` every this many steps (the first step
    included); the KL rule smooths over the measured steps. 4: its pass costs 2% of a tiny GRPO step's time
    (measured, docs/health.md "The cost of the defaults"), and the drifting test run is flagged within 13 steps."""
    kl_rows: int = Field(16, ge=1)
    """Sampled KL: how many of the step's forwarded rows (drawn by seed and step) the policy and the reference
    forward, without gradient, to measure it. 16: two groups of 8; the token mean over ~16 completions."""
    dead_frac: float = 0.5
    """dead_groups: smoothed zero-variance group fraction at or above this while the run is not improving
    (held-out pass@1 not above its step-0 figure beyond the noise of two evaluations; without two evaluations,
    the pass rate not risen by ``stall_delta`` over ``stall_steps``). 0.5: "most groups are dead", the
    definition of the screening paper's p*(G). A run whose groups are all dead is ``not_training``."""
    overfit_gap: float = 0.1
    """verifier_overfit: train pass rate up and held-out pass@1 down by at least this between the first
    and the latest held-out evals; or (code and SQL tasks, ``code_tests``) the smoothed share of samples that
    pass the training checks but fail the held-out ones, or (math tasks from a generator) the smoothed gap
    between the training problems' pass rate and their regenerated twins', up by this from its start
    (10 points: several standard errors of a 100-task held-out set)."""
    pref_accuracy_drop: float = Field(0.1, gt=0, le=1)
    """preference_drop: a held-out preference accuracy (implicit-reward, or the policy's own logp chosen >
    rejected) this far below its best earlier evaluation while the smoothed training loss is lower than it was
    then (10 points, as ``overfit_gap``: several standard errors of the difference on a 100-pair held-out set,
    paired on the same pairs)."""
    code_tests: CodeTestSplit = CodeTestSplit()
    """Held-out checks and verifier rotation for code and SQL tasks (single-turn RL stages)."""
    trunc_max: float = 0.2
    """length_blowup: smoothed truncation rate above this and above its starting value + half of it (a
    rate that was always high is a budget choice, not a blow-up; DAPO's overlong shaping starts a fifth of the
    budget before the end: a fifth of the samples at the limit is a budget problem)."""
    length_rise: float = 1.5
    """length_blowup: smoothed mean completion length above this multiple of its starting value."""
    length_corr_max: float = 0.5
    """reward_length_corr: smoothed within-batch Pearson correlation of reward and completion length above
    this while the mean length grew by ``length_corr_rise`` (the DPO length bias)."""
    length_corr_rise: float = 1.2
    """reward_length_corr: see ``length_corr_max``."""
    tool_collapse_frac: float = 0.5
    """tool_collapse (multi-turn): tool calls per trajectory below this fraction of their first-window
    mean while the pass rate did not rise."""
    stop_on_critical: bool = False
    """Stop the stage on any critical status (entropy collapse, verifier overfit, NaN, environment leak)."""
    actions: HealthActions = HealthActions()
    """What each status does (alert by default)."""
    cooldown: int = Field(10, ge=1)
    """Steps before the same action may fire again while its status persists (the EMA needs about a window
    to show an action's effect)."""
    entropy_bonus_step: float = Field(0.01, ge=0)
    """entropy_bonus / entropy_floor: coefficient increment (the usual 0.001-0.01 entropy coefficients)."""
    entropy_bonus_max: float = Field(0.05, ge=0)
    """entropy_bonus / entropy_floor: coefficient cap."""
    temperature_step: float = Field(0.2, gt=0)
    """raise_temperature: increment per firing."""
    temperature_max: float = Field(1.5, gt=0)
    """raise_temperature: cap."""
    beta_start: float = Field(0.02, gt=0)
    """adaptive_beta: β when it was 0 (PPO's usual KL coefficient 0.01-0.05)."""
    beta_factor: float = Field(2.0, gt=1)
    """adaptive_beta: multiplier per firing."""
    beta_max: float = Field(0.5, gt=0)
    """adaptive_beta: cap."""
    group_size_max: int = Field(32, ge=1)
    """grow_group: cap on G."""
    snapshot_every: int = Field(5, ge=1)
    """With a ``stop`` action: save the model to ``<stage>/healthy/`` at most every this many steps while the
    status is healthy; a stop ships it as ``final/``."""
