"""ASAp: adaptive sampling with approximate expected futures (Park et al., NeurIPS 2024).

Masked (GCD) sampling picks token ``t`` after prefix ``u`` with probability
``∝ P(t|u)·G(ut)``, where ``G`` is 1 when ``ut`` can still be completed: it ignores how
*likely* the model is to complete it, so its samples are biased. The exact sampler for
``Q(w) ∝ P(w)·1[w ∈ L]`` would use the expected future grammaticality
``EFG(ut) = P(the model, continuing ut, ends inside L)`` instead of ``G``.

ASAp keeps a trie of every prefix it has sampled. Each node stores the model's
log-probabilities of its allowed tokens and, per allowed token, an upper bound ``Ê`` of
that child's EFG (``G`` = 1 until the child is explored). After each sample, the bounds
along its path are recomputed deepest first as ``Ê(u) = Σ_t P(t|u)·Ê(ut)``: the mass of
the masked tokens is gone from the sum, so every dead end found lowers the bound of all
its ancestors. Bounds only decrease, never fall below EFG, and are exact on fully explored
subtrees, so the sampling distribution converges to ``Q`` as the trie grows (early
samples are biased; successive samples are not independent).

The trie is specific to one (model, grammar, prompt, ``max_new_tokens``): it can be saved
to an ``.npz`` file (plain arrays, no pickle) and loaded to continue.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np

from ...errors import ConfigurationError, GramgenError
from ...grammar import Grammar
from ...runtime import CompiledGrammar, compile as compile_grammar
from ..constraint import MatcherConstraint
from ..lm import LanguageModel, normalised_logprobs
from ..loop import Choice, Sequence, run

__all__ = ["ASAp", "ASApSample", "ASApSampling"]

_FORMAT = "gramgen-asap-1"


def _logsumexp(x: np.ndarray) -> float:
    if x.size == 0:
        return -np.inf
    top = float(np.max(x))
    if top == -np.inf:
        return -np.inf
    return top + float(np.log(np.sum(np.exp(x - top))))


class _Node:
    """A sampled prefix: its allowed tokens, their model log-probs and child bounds."""

    __slots__ = ("parent", "token", "allowed", "logp", "log_e", "children", "index")

    def __init__(self, parent: int, token: int, allowed: np.ndarray, logp: np.ndarray,
                 log_e: np.ndarray):
        self.parent = parent          # node index, -1 for the root
        self.token = token            # token from the parent (-1 for the root)
        self.allowed = allowed        # int64 sorted ids allowed after this prefix
        self.logp = logp              # float64 log P(t | prefix) for allowed t
        self.log_e = log_e            # float64 log Ê(prefix + t) for allowed t
        self.children: dict[int, int] = {}
        self.index: dict[int, int] | None = None

    def position(self, token: int) -> int:
        if self.index is None:
            self.index = {int(t): i for i, t in enumerate(self.allowed.tolist())}
        return self.index[token]

    def log_bound(self) -> float:
        return _logsumexp(self.logp + self.log_e)


@dataclass(frozen=True)
class ASApSample:
    """One ASAp sample: its tokens (ending with EOS), the model log-probability of those
    tokens, and how many prefixes were new (each cost one model call and one mask)."""

    tokens: list[int]
    logprob: float
    new_nodes: int


class ASAp:
    """Grammar-aligned sampling that improves with every sample it draws.

    ``ASAp(lm, grammar_or_compiled, prompt_ids)``; call :meth:`sample` repeatedly.
    Outputs are complete words of the grammar with at most ``max_new_tokens`` tokens,
    EOS included; the target is the model conditioned on that set.
    """

    def __init__(self, lm: LanguageModel, compiled, prompt_ids, *, max_new_tokens: int = 256,
                 seed: int | None = None):
        if isinstance(compiled, Grammar):
            compiled = compile_grammar(compiled, lm.vocab)
        if not isinstance(compiled, CompiledGrammar):
            raise ConfigurationError("ASAp needs a gramgen Grammar or CompiledGrammar")
        if compiled.vocab.size != lm.vocab.size:
            raise ConfigurationError(f"the grammar was compiled for {compiled.vocab.size} tokens, "
                                     f"the model has {lm.vocab.size}")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ConfigurationError(f"max_new_tokens must be a positive int, not {max_new_tokens!r}")
        self.lm = lm
        self.compiled = compiled
        self.prompt_ids = [int(t) for t in prompt_ids]
        self.max_new_tokens = int(max_new_tokens)
        self.rng = np.random.default_rng(seed)
        self.eos = frozenset(int(t) for t in lm.vocab.eos_token_ids)
        self._nodes: list[_Node] = []
        self.samples_drawn = 0
        self.mask_evaluations = 0   # full masks computed (each = vocab.size checks)
        self.model_calls = 0
        self._session = None         # one model session across samples: shared prefixes run once

    # -- the trie ----------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        return len(self._nodes)

    def _allowed(self, depth: int, matcher) -> np.ndarray:
        """Sorted ids allowed after a prefix of ``depth`` tokens (only EOS at the budget)."""
        if depth + 1 >= self.max_new_tokens:
            return np.array(sorted(t for t in self.eos if matcher.check(t)), dtype=np.int64)
        self.mask_evaluations += 1
        return np.flatnonzero(matcher.mask()).astype(np.int64)

    def _add(self, parent: int, token: int, allowed: np.ndarray, logp: np.ndarray) -> int:
        """Create the node reached from ``parent`` by ``token`` (``-1, -1``: the root)."""
        node = _Node(parent, token, allowed, np.asarray(logp, dtype=np.float64),
                     np.zeros(allowed.shape[0]))
        self._nodes.append(node)
        idx = len(self._nodes) - 1
        if parent >= 0:
            self._nodes[parent].children[token] = idx
        return idx

    def _update(self, path: list[int]) -> None:
        """Recompute the bounds along ``path`` (node indices, root first), deepest first."""
        for i in range(len(path) - 1, 0, -1):
            node, parent = self._nodes[path[i]], self._nodes[path[i - 1]]
            parent.log_e[parent.position(node.token)] = node.log_bound()

    def sample(self, max_restarts: int = 1000) -> ASApSample:
        """Draw one sample (one run of the generation loop; a dead end restarts it) and
        refine the bounds along its path."""
        if self._session is None:
            self._session = self.lm.session()
        for _ in range(max_restarts):
            step = _ASApStep(self)
            seq = Sequence(list(self.prompt_ids), MatcherConstraint(self.compiled.matcher()))
            run(self.lm, [seq], step, max_new_tokens=self.max_new_tokens, session=self._session)
            self._update(step.path)
            if seq.finish == "eos":
                self.samples_drawn += 1
                return ASApSample(seq.tokens + [seq.eos_token], seq.logprob, step.new_nodes)
            if self._nodes[0].log_bound() == -np.inf:
                break
        raise GramgenError("no grammatical continuation of the prompt has positive model "
                           f"probability within {self.max_new_tokens} tokens")

    # -- what the trie knows ----------------------------------------------------------

    def _find(self, tokens) -> tuple[int, int | None]:
        """(deepest node index on the path of ``tokens``, index of ``tokens``' node or None)."""
        if not self._nodes:
            return -1, None
        cur = 0
        for t in tokens:
            nxt = self._nodes[cur].children.get(int(t))
            if nxt is None:
                return cur, None
            cur = nxt
        return cur, cur

    def log_bound(self, tokens) -> float | None:
        """log Ê(prefix) if the trie knows it: for a node, or a token the node's parent
        allows (Ê = G = 1 until explored, exactly 1 after EOS); ``-inf`` for a token its
        parent does not allow; None when the trie has not reached it."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            return self._nodes[0].log_bound() if self._nodes else None
        _, node = self._find(tokens)
        if node is not None:
            return self._nodes[node].log_bound()
        parent_path = self._find(tokens[:-1])[1]
        if parent_path is None:
            return None
        parent = self._nodes[parent_path]
        t = tokens[-1]
        if t not in set(parent.allowed.tolist()):
            return -np.inf
        return float(parent.log_e[parent.position(t)])

    def twist(self, tokens: tuple[int, ...]) -> float:
        """log Ê as an SMC twist: the learned bound where known, else ``log G = 0``
        (SMC only proposes allowed tokens). Normalised by nothing: Ê(complete) = 1."""
        value = self.log_bound(tokens)
        return 0.0 if value is None else value

    def next_token_distribution(self, tokens) -> tuple[np.ndarray, np.ndarray] | None:
        """(allowed ids, probabilities) the next draw after ``tokens`` would use, or None
        if the trie has no node there."""
        _, node = self._find(tokens)
        if node is None:
            return None
        n = self._nodes[node]
        scores = n.logp + n.log_e
        total = _logsumexp(scores)
        return n.allowed.copy(), (np.exp(scores - total) if total > -np.inf
                                  else np.zeros_like(scores))

    def same_grammar(self, compiled) -> bool:
        """Whether ``compiled`` is this trie's grammar over the same vocabulary (an equal
        recompilation counts: the trie is about the language, not the object)."""
        return compiled is self.compiled or (
            compiled.vocab.size == self.compiled.vocab.size
            and compiled.vocab.tokens == self.compiled.vocab.tokens
            and _grammar_fingerprint(compiled) == _grammar_fingerprint(self.compiled))

    # -- persistence --------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write the trie to ``path`` (numpy ``.npz``, plain arrays plus a JSON header)."""
        nodes = self._nodes
        sizes = np.array([n.allowed.shape[0] for n in nodes], dtype=np.int64)
        empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0)
        header = {
            "format": _FORMAT, "vocab_size": self.lm.vocab.size, "prompt_ids": self.prompt_ids,
            "max_new_tokens": self.max_new_tokens, "samples_drawn": self.samples_drawn,
            "grammar": _grammar_fingerprint(self.compiled),
        }
        with open(path, "wb") as fh:
            np.savez_compressed(
                fh,
                header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
                parent=np.array([n.parent for n in nodes], dtype=np.int64),
                token=np.array([n.token for n in nodes], dtype=np.int64),
                sizes=sizes,
                allowed=np.concatenate([n.allowed for n in nodes]) if nodes else empty_i,
                logp=np.concatenate([n.logp for n in nodes]) if nodes else empty_f,
                log_e=np.concatenate([n.log_e for n in nodes]) if nodes else empty_f,
            )

    @classmethod
    def load(cls, path: str | os.PathLike, lm: LanguageModel, compiled, *,
             seed: int | None = None) -> ASAp:
        """Continue from a trie written by :meth:`save`, for the same grammar and model
        vocabulary (checked); the prompt and budget come from the file."""
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(bytes(data["header"]).decode())
            if header.get("format") != _FORMAT:
                raise GramgenError(f"{path} is not a gramgen ASAp trie")
            arrays = {k: data[k] for k in ("parent", "token", "sizes", "allowed", "logp", "log_e")}
        self = cls(lm, compiled, header["prompt_ids"], max_new_tokens=header["max_new_tokens"],
                   seed=seed)
        if header["vocab_size"] != lm.vocab.size:
            raise GramgenError(f"the trie was built for {header['vocab_size']} tokens, "
                               f"the model has {lm.vocab.size}")
        if header["grammar"] != _grammar_fingerprint(self.compiled):
            raise GramgenError("the trie was built for a different grammar")
        offsets = np.concatenate([[0], np.cumsum(arrays["sizes"])])
        for i in range(arrays["parent"].shape[0]):
            a, b = offsets[i], offsets[i + 1]
            node = _Node(int(arrays["parent"][i]), int(arrays["token"][i]),
                         arrays["allowed"][a:b].copy(), arrays["logp"][a:b].copy(),
                         arrays["log_e"][a:b].copy())
            self._nodes.append(node)
            if node.parent >= 0:
                self._nodes[node.parent].children[node.token] = i
        self.samples_drawn = header["samples_drawn"]
        return self


class _ASApStep:
    """One ASAp sample as a step strategy of the generation loop: draws follow the trie's
    adjusted distribution ``P(t|u)·Ê(ut)``; a prefix new to the trie becomes a node (its
    mask, and the model's logits, which only new prefixes need)."""

    def __init__(self, asap: ASAp):
        self.asap = asap
        self.path: list[int] = []   # node indices from the root
        self.new_nodes = 0
        self._allowed: np.ndarray | None = None   # of the prefix awaiting its node

    def _node_here(self, seq: Sequence) -> int | None:
        nodes = self.asap._nodes
        if not self.path:
            return 0 if nodes else None
        return nodes[self.path[-1]].children.get(seq.tokens[-1])

    def prepare(self, seq: Sequence, max_new_tokens: int) -> None:
        node = self._node_here(seq)
        if node is not None:
            self.path.append(node)
            seq.needs_logits = False
            return
        self._allowed = self.asap._allowed(len(seq.tokens), seq.constraint.matcher)
        seq.needs_logits = self._allowed.size > 0

    def choose(self, seqs: list[Sequence], logits) -> list[Choice]:
        asap = self.asap
        (seq,) = seqs
        if self._allowed is not None:   # a new prefix: its node
            allowed, self._allowed = self._allowed, None
            logp = np.zeros(0)
            if allowed.size:
                logp = normalised_logprobs(logits, asap.lm.vocab)[0][allowed]
                asap.model_calls += 1
            parent = self.path[-1] if self.path else -1
            self.path.append(asap._add(parent, seq.tokens[-1] if self.path else -1, allowed, logp))
            self.new_nodes += 1
        node = asap._nodes[self.path[-1]]
        scores = node.logp + node.log_e
        total = _logsumexp(scores)
        if total == -np.inf:   # a dead end (no allowed token has model mass)
            return [Choice(None)]
        probs = np.exp(scores - total)
        j = int(asap.rng.choice(probs.shape[0], p=probs / probs.sum()))
        return [Choice(int(node.allowed[j]), float(node.logp[j]))]

    def after_step(self, population: list[Sequence], step: int) -> list[Sequence]:
        return population


@dataclass(frozen=True)
class ASApSampling:
    """ASAp options for :func:`gramgen.generate`: ``trie`` to keep learning in (built for
    the same prompt, grammar and ``max_new_tokens``; default a new one per prompt) and
    ``warmup`` samples drawn to refine it before the one returned."""

    trie: ASAp | None = None
    warmup: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ConfigurationError(f"warmup must be a non-negative int, not {self.warmup!r}")


def _grammar_fingerprint(compiled) -> str:
    ir = compiled.grammar.ir
    text = repr((ir.start, ir.rules, sorted(ir.lexemes.items()), ir.ignore))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
