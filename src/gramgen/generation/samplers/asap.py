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

An :class:`ASApTrie` is specific to one *target*: (model, grammar, prompt,
``max_new_tokens``). An :class:`ASAp` is what a user keeps across
:func:`gramgen.generate` calls: a bounded set of tries, one per target met. Both save to
an ``.npz`` file (plain arrays and a JSON header, no pickle) and load back to continue.
``generate(..., sampler="asap")`` without an object keeps one ``ASAp`` per model in the
process (:func:`shared_state`), so repeated calls keep learning.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..._lru import LRU
from ...errors import ConfigurationError, GramgenError
from ...grammar import Grammar
from ...runtime import CompiledGrammar, compile as compile_grammar
from ..constraint import MatcherConstraint
from ..lm import LanguageModel, normalised_logprobs
from ..loop import Choice, Sequence, run

__all__ = ["ASAp", "ASApSample", "ASApSampling", "ASApTrie", "shared_state"]

_FORMAT = "gramgen-asap-1"              # one trie
_STATE_FORMAT = "gramgen-asap-state-1"  # an ASAp: several tries
_ARRAYS = ("parent", "token", "sizes", "allowed", "logp", "log_e")
#: bytes a node takes beyond its three arrays (the object, its slots, its children dict)
_NODE_OVERHEAD = 256


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

    @property
    def nbytes(self) -> int:
        return self.allowed.nbytes + self.logp.nbytes + self.log_e.nbytes + _NODE_OVERHEAD


@dataclass(frozen=True)
class ASApSample:
    """One ASAp sample: its tokens (ending with EOS), the model log-probability of those
    tokens, and how many prefixes were new (each cost one model call and one mask)."""

    tokens: list[int]
    logprob: float
    new_nodes: int


def _positive_int(name: str, value, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigurationError(f"{name} must be a positive int, not {value!r}")


class ASApTrie:
    """The ASAp trie of one target: grammar-aligned sampling that improves with every
    sample it draws.

    ``ASApTrie(lm, grammar_or_compiled, prompt_ids)``; call :meth:`sample` repeatedly.
    Outputs are complete words of the grammar with at most ``max_new_tokens`` tokens,
    EOS included; the target is the model conditioned on that set. ``max_bytes`` (None:
    unbounded) stops the trie growing: prefixes new once it holds that many bytes are
    sampled as plain masking does (their bound stays ``G``, still an upper bound).
    """

    def __init__(self, lm: LanguageModel, compiled, prompt_ids, *, max_new_tokens: int = 256,
                 seed: int | None = None, max_bytes: int | None = None):
        if isinstance(compiled, Grammar):
            compiled = compile_grammar(compiled, lm.vocab)
        _positive_int("max_new_tokens", max_new_tokens)
        _positive_int("max_bytes", max_bytes, allow_none=True)
        self._init_state(prompt_ids, max_new_tokens, seed, max_bytes)
        self._attach(lm, compiled)

    def _init_state(self, prompt_ids, max_new_tokens: int, seed, max_bytes) -> None:
        self.lm: LanguageModel | None = None
        self.compiled: CompiledGrammar | None = None
        self.prompt_ids = [int(t) for t in prompt_ids]
        self.max_new_tokens = int(max_new_tokens)
        self.max_bytes = max_bytes
        self.rng = np.random.default_rng(seed)
        self._nodes: list[_Node] = []
        self.nbytes = 0              # what the nodes hold (see _Node.nbytes)
        self.samples_drawn = 0
        self.mask_evaluations = 0   # full masks computed (each = vocab.size checks)
        self.model_calls = 0
        #: the loop's statistics of the last sample's final run
        self.last_stats = None
        self._session = None         # one model session across samples: shared prefixes run once

    def _attach(self, lm: LanguageModel, compiled) -> None:
        """Use ``lm`` and ``compiled`` for the next samples (a loaded or parked trie has neither)."""
        if not isinstance(compiled, CompiledGrammar):
            raise ConfigurationError("ASAp needs a gramgen Grammar or CompiledGrammar, not "
                                     f"{type(compiled).__name__}")
        if compiled.vocab.size != lm.vocab.size:
            raise ConfigurationError(f"the grammar was compiled for {compiled.vocab.size} tokens, "
                                     f"the model has {lm.vocab.size}")
        self.lm, self.compiled = lm, compiled
        self.eos = frozenset(int(t) for t in lm.vocab.eos_token_ids)

    def close(self) -> None:
        """End the model session kept across samples (it holds the model's key/value
        cache); the next sample opens a new one."""
        session, self._session = self._session, None
        close = getattr(session, "close", None)
        if close is not None:
            close()

    def _park(self) -> None:
        """Let go of the model and the grammar until :meth:`_attach` (what an :class:`ASAp`
        does between calls, so that its cache never keeps a model alive)."""
        self.close()
        self.lm = self.compiled = None

    # -- the trie ----------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        return len(self._nodes)

    def _has_room(self) -> bool:
        return self.max_bytes is None or self.nbytes < self.max_bytes

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
        self.nbytes += node.nbytes
        idx = len(self._nodes) - 1
        if parent >= 0:
            self._nodes[parent].children[token] = idx
        return idx

    def _update(self, path: list[int]) -> None:
        """Recompute the bounds along ``path`` (node indices, root first), deepest first."""
        for i in range(len(path) - 1, 0, -1):
            node, parent = self._nodes[path[i]], self._nodes[path[i - 1]]
            parent.log_e[parent.position(node.token)] = node.log_bound()

    def sample(self, max_restarts: int = 1000, drafter=None) -> ASApSample:
        """Draw one sample (one run of the generation loop; a dead end restarts it) and
        refine the bounds along its path. ``drafter``: speculative decoding (drafts are
        verified against ASAp's own draws, so the samples are the same in distribution)."""
        if self.lm is None:
            raise GramgenError("this ASAp trie is not attached to a model: get it from "
                               "ASAp.trie(model, grammar, prompt_ids)")
        if self._session is None:
            self._session = self.lm.session()
        for _ in range(max_restarts):
            step = _ASApStep(self)
            seq = Sequence(list(self.prompt_ids), MatcherConstraint(self.compiled.matcher()))
            run(self.lm, [seq], step, max_new_tokens=self.max_new_tokens, session=self._session,
                drafter=drafter)
            self.last_stats = seq.stats
            self._update(step.path)
            if seq.finish == "eos":
                self.samples_drawn += 1
                return ASApSample(seq.tokens + [seq.eos_token], seq.logprob, step.new_nodes)
            if self._nodes and self._nodes[0].log_bound() == -np.inf:
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
            and grammar_fingerprint(compiled) == grammar_fingerprint(self.compiled))

    # -- persistence --------------------------------------------------------------------

    def _header(self) -> dict:
        return {"vocab_size": self.compiled.vocab.size, "prompt_ids": self.prompt_ids,
                "max_new_tokens": self.max_new_tokens, "samples_drawn": self.samples_drawn,
                "grammar": grammar_fingerprint(self.compiled), "nodes": len(self._nodes)}

    def _arrays(self) -> dict[str, np.ndarray]:
        nodes = self._nodes
        empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0)
        return {
            "parent": np.array([n.parent for n in nodes], dtype=np.int64),
            "token": np.array([n.token for n in nodes], dtype=np.int64),
            "sizes": np.array([n.allowed.shape[0] for n in nodes], dtype=np.int64),
            "allowed": np.concatenate([n.allowed for n in nodes]) if nodes else empty_i,
            "logp": np.concatenate([n.logp for n in nodes]) if nodes else empty_f,
            "log_e": np.concatenate([n.log_e for n in nodes]) if nodes else empty_f,
        }

    def _restore_nodes(self, arrays: dict[str, np.ndarray], where: str) -> None:
        """Rebuild the nodes from :meth:`_arrays`' output, checking that they form a trie."""
        parent, token, sizes = arrays["parent"], arrays["token"], arrays["sizes"]
        n = parent.shape[0]
        if token.shape[0] != n or sizes.shape[0] != n or np.any(sizes < 0) or not (
                arrays["allowed"].shape[0] == arrays["logp"].shape[0] == arrays["log_e"].shape[0]
                == int(sizes.sum())) or (n and (parent[0] != -1 or np.any(parent[1:] < 0)
                                                or np.any(parent[1:] >= np.arange(1, n)))):
            raise GramgenError(f"{where} is not a consistent ASAp trie (damaged file?)")
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        for i in range(n):
            a, b = offsets[i], offsets[i + 1]
            node = _Node(int(parent[i]), int(token[i]), arrays["allowed"][a:b].astype(np.int64),
                         arrays["logp"][a:b].astype(np.float64),
                         arrays["log_e"][a:b].astype(np.float64))
            self._nodes.append(node)
            self.nbytes += node.nbytes
            if node.parent >= 0:
                self._nodes[node.parent].children[node.token] = i

    def save(self, path: str | os.PathLike) -> None:
        """Write the trie to ``path`` (numpy ``.npz``, plain arrays plus a JSON header)."""
        header = dict(self._header(), format=_FORMAT)
        with open(path, "wb") as fh:
            np.savez_compressed(fh, header=_json_array(header), **self._arrays())

    @classmethod
    def load(cls, path: str | os.PathLike, lm: LanguageModel, compiled, *,
             seed: int | None = None) -> ASApTrie:
        """Continue from a trie written by :meth:`save`, for the same grammar and model
        vocabulary (checked); the prompt and budget come from the file."""
        header, arrays = _read_npz(path, _FORMAT)
        self = cls(lm, compiled, header["prompt_ids"], max_new_tokens=header["max_new_tokens"],
                   seed=seed)
        if header["vocab_size"] != lm.vocab.size:
            raise GramgenError(f"the trie was built for {header['vocab_size']} tokens, "
                               f"the model has {lm.vocab.size}")
        if header["grammar"] != grammar_fingerprint(self.compiled):
            raise GramgenError("the trie was built for a different grammar")
        self._restore_nodes({k: arrays[k] for k in _ARRAYS}, str(path))
        self.samples_drawn = header["samples_drawn"]
        return self


class ASAp:
    """What ``sampler="asap"`` learns, kept across :func:`gramgen.generate` calls.

    ``asap = gramgen.ASAp()``, then ``generate(model, prompt, ..., sampler=asap)`` as often
    as needed: each call draws one sample from the trie of its *target* (the compiled
    grammar, the prompt's token ids after the chat template, ``max_new_tokens``) and
    refines it, so the samples of one target converge to the model conditioned on the
    grammar (ASAp always samples the model at temperature 1, without top-k/top-p). One
    ``ASAp`` learns from one model: another model object is refused while the first is
    alive, and one with another vocabulary or architecture always.

    Memory: a trie node holds 24 bytes per token its prefix allows (ids, model
    log-probabilities, bounds), so a node inside a JSON string over a 50k-token
    vocabulary weighs about 1 MB. ``max_bytes`` bounds all tries together: the least
    recently used tries are dropped first, and the trie in use stops growing at
    ``max_bytes`` (prefixes new after that are sampled with plain masking: a valid bound,
    learning nothing). ``max_tries`` bounds the number of targets kept.

    :meth:`save` writes one ``.npz`` file (plain arrays and a JSON header, no pickle);
    :meth:`load` reads it back to continue; a trie is reused only for a grammar with the
    same fingerprint.
    """

    def __init__(self, *, max_bytes: int = 256 * 2**20, max_tries: int = 64):
        _positive_int("max_bytes", max_bytes)
        _positive_int("max_tries", max_tries)
        self.max_bytes = int(max_bytes)
        self.max_tries = int(max_tries)
        self._tries: OrderedDict[tuple, ASApTrie] = OrderedDict()
        self._lock = threading.RLock()
        self._model: weakref.ref | None = None
        self._model_label: str | None = None
        self._vocab_fingerprint: str | None = None

    def __len__(self) -> int:
        return len(self._tries)

    def __repr__(self) -> str:
        return (f"ASAp({len(self)} targets, {self.samples_drawn} samples, "
                f"{self.nbytes / 2**20:.1f} of {self.max_bytes / 2**20:.0f} MiB)")

    @property
    def nbytes(self) -> int:
        """Bytes the tries hold (what ``max_bytes`` bounds)."""
        return sum(t.nbytes for t in list(self._tries.values()))

    @property
    def samples_drawn(self) -> int:
        return sum(t.samples_drawn for t in list(self._tries.values()))

    def clear(self) -> None:
        """Forget every trie (the model binding stays)."""
        with self._lock:
            for trie in self._tries.values():
                trie.close()
            self._tries.clear()

    def _bind(self, lm: LanguageModel) -> None:
        """Learn from ``lm`` only (see the class docstring)."""
        bound = self._model() if self._model is not None else None
        if bound is lm:
            return
        if bound is not None:
            raise ConfigurationError("this gramgen.ASAp learns from another model object: use "
                                     "one ASAp per model")
        label, fingerprint = model_label(lm), lm.vocab.fingerprint
        if self._vocab_fingerprint not in (None, fingerprint):
            raise ConfigurationError("this gramgen.ASAp was learned with a model of another "
                                     "vocabulary: use a new ASAp for this model")
        if self._model_label not in (None, label):
            raise ConfigurationError(f"this gramgen.ASAp was learned with a {self._model_label} "
                                     f"model, not {label}: use a new ASAp for this model")
        self._model = _ref(lm)
        self._model_label, self._vocab_fingerprint = label, fingerprint

    def trie(self, lm: LanguageModel, grammar, prompt_ids, *,
             max_new_tokens: int = 256) -> ASApTrie:
        """The trie of one target (new if unseen), attached to ``lm`` for :meth:`ASApTrie.sample`
        or as an SMC twist until a :func:`~gramgen.generate` call with this ``ASAp`` parks it."""
        compiled = compile_grammar(grammar, lm.vocab) if isinstance(grammar, Grammar) else grammar
        if not isinstance(compiled, CompiledGrammar):
            raise ConfigurationError("ASAp needs a gramgen Grammar or CompiledGrammar, not "
                                     f"{type(compiled).__name__}")
        _positive_int("max_new_tokens", max_new_tokens)
        prompt = tuple(int(t) for t in prompt_ids)
        key = (grammar_fingerprint(compiled), prompt, int(max_new_tokens))
        with self._lock:
            self._bind(lm)
            trie = self._tries.get(key)
            if trie is None:
                trie = ASApTrie(lm, compiled, prompt, max_new_tokens=max_new_tokens,
                                max_bytes=self.max_bytes)
                self._tries[key] = trie
            else:
                if trie.compiled is not compiled:
                    trie._attach(lm, compiled)
                self._tries.move_to_end(key)
            self._evict()
        return trie

    def _evict(self) -> None:
        """Drop the least recently used tries beyond ``max_tries`` and ``max_bytes`` (never
        the most recent one)."""
        while len(self._tries) > 1 and (len(self._tries) > self.max_tries
                                        or self.nbytes > self.max_bytes):
            _, old = self._tries.popitem(last=False)
            old.close()

    def _release(self, trie: ASApTrie) -> None:
        """After a generate call: park ``trie`` and keep within the bounds."""
        with self._lock:
            trie._park()
            self._evict()

    # -- persistence --------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write every trie to ``path`` (numpy ``.npz``: plain arrays and a JSON header)."""
        with self._lock:
            tries = list(self._tries.items())
            header = {"format": _STATE_FORMAT, "model": self._model_label,
                      "vocab": self._vocab_fingerprint, "max_bytes": self.max_bytes,
                      "max_tries": self.max_tries, "tries": []}
            arrays: dict[str, np.ndarray] = {}
            for i, ((fingerprint, prompt, budget), trie) in enumerate(tries):
                header["tries"].append({"grammar": fingerprint, "prompt_ids": list(prompt),
                                        "max_new_tokens": budget,
                                        "samples_drawn": trie.samples_drawn})
                arrays.update({f"t{i}_{k}": v for k, v in trie._arrays().items()})
        with open(path, "wb") as fh:
            np.savez_compressed(fh, header=_json_array(header), **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike, *, max_bytes: int | None = None,
             max_tries: int | None = None) -> ASAp:
        """An ``ASAp`` continuing from a file written by :meth:`save` (bounds from the
        file unless given). It learns only from a model like the one it was saved with."""
        header, arrays = _read_npz(path, _STATE_FORMAT)
        try:
            self = cls(max_bytes=header["max_bytes"] if max_bytes is None else max_bytes,
                       max_tries=header["max_tries"] if max_tries is None else max_tries)
            self._model_label, self._vocab_fingerprint = header["model"], header["vocab"]
            for i, entry in enumerate(header["tries"]):
                trie = ASApTrie.__new__(ASApTrie)
                trie._init_state(entry["prompt_ids"], entry["max_new_tokens"], None, self.max_bytes)
                trie._restore_nodes({k: arrays[f"t{i}_{k}"] for k in _ARRAYS}, str(path))
                trie.samples_drawn = int(entry["samples_drawn"])
                key = (entry["grammar"], tuple(trie.prompt_ids), trie.max_new_tokens)
                self._tries[key] = trie
        except (KeyError, TypeError, ValueError) as exc:
            raise GramgenError(f"{path} is not a consistent gramgen ASAp file "
                               f"({type(exc).__name__}: {exc})") from None
        self._evict()
        return self


#: the ASAp state of ``sampler="asap"`` per model (id, guarded by a weak reference)
_shared: LRU[int, tuple] = LRU(4)
_shared_lock = threading.Lock()


def shared_state(lm: LanguageModel) -> ASAp:
    """The in-process :class:`ASAp` that ``generate(..., sampler="asap")`` uses for ``lm``
    (one per model, for the 4 models used last; each bounded by ``ASAp``'s default
    ``max_bytes``). A model that is garbage collected takes its state with it."""
    with _shared_lock:
        found = _shared.get(id(lm))
        if found is not None and found[0]() is lm:
            return found[1]
        state = ASAp()
        _shared.put(id(lm), (_ref(lm), state))
        return state


def _ref(obj) -> weakref.ref:
    """A weak reference, or a strong one dressed as one for objects that refuse weak ones."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def model_label(lm) -> str:
    """What a saved ASAp state records of its model: the class, and for a transformers
    model its type and shape (paths change between installs, so they are left out)."""
    config = getattr(getattr(lm, "hf_model", None), "config", None)
    if config is None:
        return type(lm).__name__
    shape = [getattr(config, k, None) for k in ("model_type", "hidden_size", "num_hidden_layers",
                                                "vocab_size")]
    return "/".join(str(v) for v in shape)


def _json_array(obj) -> np.ndarray:
    return np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8)


def _read_npz(path, expected_format: str) -> tuple[dict, dict[str, np.ndarray]]:
    """(the JSON header, every array) of an ASAp ``.npz`` file; never unpickles."""
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(bytes(data["header"]).decode())
            arrays = {k: data[k] for k in data.files if k != "header"}
    except FileNotFoundError:
        raise ConfigurationError(f"no such ASAp file: {path}") from None
    except (OSError, ValueError, KeyError, UnicodeDecodeError) as exc:
        raise GramgenError(f"{path} is not a gramgen ASAp file ({type(exc).__name__}: {exc})") from None
    if not isinstance(header, dict) or header.get("format") != expected_format:
        kind = "trie (ASApTrie.load)" if expected_format == _FORMAT else "state (ASAp.load)"
        raise GramgenError(f"{path} is not a gramgen ASAp {kind}")
    return header, arrays


class _ASApStep:
    """One ASAp sample as a step strategy of the generation loop: draws follow the trie's
    adjusted distribution ``P(t|u)·Ê(ut)``; a prefix new to the trie becomes a node (its
    mask, and the model's logits, which only new prefixes need). Once the trie is full,
    the rest of the sample runs off the trie: masked sampling, nothing stored."""

    def __init__(self, asap: ASApTrie):
        self.asap = asap
        self.path: list[int] = []   # node indices from the root
        self.new_nodes = 0
        self._allowed: np.ndarray | None = None   # of the prefix awaiting its node
        self._off_trie = False

    def _node_here(self, seq: Sequence) -> int | None:
        if self._off_trie:
            return None
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
        (seq,) = seqs
        draft = seq.draft
        if draft is None:
            node = self._node(seq, None if logits is None else (logits[:, -1] if logits.ndim == 3 else logits))
            token, logprob = self._draw(node)
            return [Choice(token, logprob)]
        # speculative decoding: ASAp's own draw at each drafted position (a node of the
        # trie, new ones made from that position's logits); a draft is kept iff the draw
        # equals it, so every draw is the one plain ASAp would make there
        rows = logits[:, logits.shape[1] - len(draft) - 1:]
        accepted: list[int] = []
        logprob = 0.0
        fork, advanced = None, 0   # the constraint over the first ``advanced`` drafts
        for j in range(len(draft) + 1):
            if j:
                nodes = self.asap._nodes
                child = None if self._off_trie else nodes[self.path[-1]].children.get(draft.tokens[j - 1])
                if child is not None:
                    self.path.append(child)
                else:
                    if fork is None:
                        fork = seq.constraint.fork()
                    for t in draft.tokens[advanced:j]:
                        fork.advance(t)
                    advanced = j
                    self._allowed = self.asap._allowed(len(seq.tokens) + j, fork.matcher)
            node = self._node(seq, rows[:, j], grown=accepted)
            token, lp = self._draw(node)
            if token is None:
                return [Choice(None, logprob, 0.0, tuple(accepted))]
            logprob += lp
            if j < len(draft) and token == draft.tokens[j] and token not in self.asap.eos:
                accepted.append(token)
                continue
            return [Choice(token, logprob, 0.0, tuple(accepted))]
        raise AssertionError("unreachable")  # pragma: no cover

    def _node(self, seq: Sequence, logits, grown: list[int] = ()) -> _Node:
        """The node of the current prefix (``seq.tokens`` and ``grown``): the one on the
        path, or a new one made from ``logits`` ``[1, width]`` and the allowed tokens
        computed in prepare."""
        asap = self.asap
        if self._allowed is None:
            return asap._nodes[self.path[-1]]
        allowed, self._allowed = self._allowed, None
        logp = np.zeros(0)
        if allowed.size:
            logp = normalised_logprobs(logits, asap.lm.vocab)[0][allowed]
            asap.model_calls += 1
        if not self._off_trie and asap._has_room():
            parent = self.path[-1] if self.path else -1
            prefix = list(seq.tokens) + list(grown)
            self.path.append(asap._add(parent, prefix[-1] if self.path else -1, allowed, logp))
            self.new_nodes += 1
            return asap._nodes[self.path[-1]]
        self._off_trie = True
        return _Node(-1, -1, allowed, logp, np.zeros(allowed.shape[0]))

    def _draw(self, node: _Node) -> tuple[int | None, float]:
        """A token from the node's adjusted distribution ``P(t|u)·Ê(ut)`` and its model
        log-probability (None: a dead end, no allowed token has model mass)."""
        scores = node.logp + node.log_e
        total = _logsumexp(scores)
        if total == -np.inf:
            return None, 0.0
        probs = np.exp(scores - total)
        j = int(self.asap.rng.choice(probs.shape[0], p=probs / probs.sum()))
        return int(node.allowed[j]), float(node.logp[j])

    def after_step(self, population: list[Sequence], step: int) -> list[Sequence]:
        return population


@dataclass(frozen=True)
class ASApSampling:
    """ASAp options for :func:`gramgen.generate`: where to keep learning, and ``warmup``
    samples drawn to refine the trie before the one returned.

    ``state``: an :class:`ASAp` (any prompt and grammar); ``trie``: one
    :class:`ASApTrie` built for the same prompt, grammar and ``max_new_tokens``. Neither:
    the model's in-process state (:func:`shared_state`)."""

    trie: ASApTrie | None = None
    warmup: int = 0
    state: ASAp | None = None

    def __post_init__(self) -> None:
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ConfigurationError(f"warmup must be a non-negative int, not {self.warmup!r}")
        if self.trie is not None and not isinstance(self.trie, ASApTrie):
            raise ConfigurationError(f"trie= takes an ASApTrie, not {type(self.trie).__name__}"
                                     + (" (give an ASAp as state=)" if isinstance(self.trie, ASAp) else ""))
        if self.state is not None and not isinstance(self.state, ASAp):
            raise ConfigurationError(f"state= takes a gramgen.ASAp, not {type(self.state).__name__}")
        if self.trie is not None and self.state is not None:
            raise ConfigurationError("give trie= or state=, not both")


_fingerprints: "weakref.WeakKeyDictionary[CompiledGrammar, str]" = weakref.WeakKeyDictionary()


def grammar_fingerprint(compiled) -> str:
    """A digest of the grammar's IR, stable across processes: equal recompilations share it
    (the vocabulary is checked apart)."""
    try:
        return _fingerprints[compiled]
    except (KeyError, TypeError):
        pass
    ir = compiled.grammar.ir
    text = repr((ir.start, ir.rules, sorted(ir.lexemes.items()), ir.ignore))
    value = hashlib.sha256(text.encode()).hexdigest()[:16]
    try:
        _fingerprints[compiled] = value
    except TypeError:
        pass
    return value
