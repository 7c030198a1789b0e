"""The per-attribute indexes: vectors (HNSW through hnswlib, FLAT exact in numpy), tags and numbers.

Distances are valkey-search's (it vendors hnswlib): L2 is the squared Euclidean distance, IP is 1 - dot,
COSINE is 1 - dot of the normalized vectors (a zero vector stays zero). Every index is keyed by a label, an
integer the owning Index gives each key, so filters and vectors meet as sets of labels.

Why hnswlib (measured with scripts/measure_ann_libs.py, docs/modules.md "Search"): it is the library
valkey-search itself vendors, so graphs, distances and EF semantics are the module's; on this machine it
had the fastest queries and the smallest memory per vector of the three candidates, and it deletes
(mark_deleted, with deleted slots reused by later inserts), which faiss's HNSW cannot.
"""

import bisect

from .lazynumpy import np

try:   # an optional dependency: without it, HNSW indexes are refused at FT.CREATE (FLAT still works)
    import hnswlib
except ImportError:  # pragma: no cover - the package is a dependency; a broken install only
    hnswlib = None

_EXACT_CHUNK = 16384


def _distances(matrix, query, metric):
    """Exact distances of query to every row of matrix (float32), as valkey-search's spaces define them."""
    out = np.empty(len(matrix), dtype=np.float32)
    for s in range(0, len(matrix), _EXACT_CHUNK):
        block = matrix[s:s + _EXACT_CHUNK]
        if metric == "L2":
            diff = block - query
            out[s:s + len(block)] = np.einsum("ij,ij->i", diff, diff)
        else:   # IP; COSINE vectors are stored normalized and the query is normalized by the caller
            out[s:s + len(block)] = 1.0 - block.dot(query)
    return out


def normalized(vec):
    norm = float(np.sqrt(np.dot(vec, vec)))
    return vec / norm if norm != 0.0 else vec


def top_k(labels, distances, k):
    """[(distance, label)] of the k smallest, nearest first; ties by label."""
    n = len(labels)
    if n == 0 or k <= 0:
        return []
    if k < n:
        idx = np.argpartition(distances, k - 1)[:k]
    else:
        idx = np.arange(n)
    pairs = [(float(distances[i]), int(labels[i])) for i in idx]
    pairs.sort()
    return pairs


class FlatVectors:
    """FLAT: every vector in one growing float32 matrix (rows 0..n-1 live; a removal moves the last row into
    the hole), searched exactly."""

    algorithm = "FLAT"

    def __init__(self, attr):
        self.attr = attr
        self.dim = attr.dim
        self.metric = attr.metric
        self.block = max(1, attr.block_size)
        self.capacity = max(1, attr.initial_cap)
        self.matrix = np.zeros((min(self.capacity, 1024), self.dim), dtype=np.float32)
        self.rows = 0
        self.row_of = {}       # label -> row
        self.label_at = []     # row -> label

    def __len__(self):
        return self.rows

    def _grow(self):
        if self.rows >= self.capacity:
            self.capacity += self.block   # valkey-search's FLAT grows by BLOCK_SIZE
        if self.rows >= len(self.matrix):
            bigger = np.zeros((max(len(self.matrix) * 2, self.rows + 1), self.dim), dtype=np.float32)
            bigger[:self.rows] = self.matrix[:self.rows]
            self.matrix = bigger

    def add(self, label, vec):
        if self.metric == "COSINE":
            vec = normalized(vec)
        row = self.row_of.get(label)
        if row is None:
            self._grow()
            row = self.rows
            self.rows += 1
            self.row_of[label] = row
            self.label_at.append(label)
        self.matrix[row] = vec

    def remove(self, label):
        row = self.row_of.pop(label, None)
        if row is None:
            return
        last = self.rows - 1
        if row != last:
            moved = self.label_at[last]
            self.matrix[row] = self.matrix[last]
            self.label_at[row] = moved
            self.row_of[moved] = row
        self.label_at.pop()
        self.rows = last

    def vectors_of(self, labels):
        rows = [self.row_of[lb] for lb in labels]
        return self.matrix[rows]

    def search(self, query, k, ef=None, allowed=None):
        if self.metric == "COSINE":
            query = normalized(query)
        if allowed is None:
            labels = self.label_at
            d = _distances(self.matrix[:self.rows], query, self.metric)
        else:
            labels = [lb for lb in allowed if lb in self.row_of]
            if not labels:
                return []
            d = _distances(self.vectors_of(labels), query, self.metric)
        return top_k(labels, d, k)

    def memory_bytes(self):
        return int(self.matrix.nbytes + 64 * len(self.row_of))


class HnswVectors:
    """HNSW through hnswlib. Labels are the owner's; a removed label is marked deleted and its slot reused by
    a later insert (allow_replace_deleted, as valkey-search sets it); the graph grows by doubling."""

    algorithm = "HNSW"

    def __init__(self, attr):
        if hnswlib is None:
            raise RuntimeError("hnswlib is not installed")
        self.attr = attr
        self.dim = attr.dim
        self.metric = attr.metric
        space = {"L2": "l2", "IP": "ip", "COSINE": "cosine"}[attr.metric]
        self.index = hnswlib.Index(space=space, dim=attr.dim)
        self.capacity = max(1, attr.initial_cap)
        self.index.init_index(max_elements=self.capacity, M=attr.m, ef_construction=attr.ef_construction,
                              random_seed=100, allow_replace_deleted=True)
        self.index.set_num_threads(1)
        self.ef_runtime = attr.ef_runtime
        self.index.set_ef(self.ef_runtime)
        self.live = set()
        self.deleted = 0

    def __len__(self):
        return len(self.live)

    def add(self, label, vec):
        index = self.index
        if label in self.live:
            index.add_items(vec.reshape(1, -1), [label])   # hnswlib updates the point in place
            return
        if self.deleted:
            index.add_items(vec.reshape(1, -1), [label], replace_deleted=True)
            self.deleted -= 1
        else:
            if index.get_current_count() >= self.capacity:
                self.capacity *= 2
                index.resize_index(self.capacity)
            index.add_items(vec.reshape(1, -1), [label])
        self.live.add(label)

    def remove(self, label):
        if label in self.live:
            self.live.discard(label)
            self.index.mark_deleted(label)
            self.deleted += 1

    def vectors_of(self, labels):
        return np.asarray(self.index.get_items(list(labels)), dtype=np.float32)

    def search(self, query, k, ef=None, allowed=None):
        live = self.live
        if not live:
            return []
        if allowed is not None:
            allowed = allowed & live if type(allowed) is set else {lb for lb in allowed if lb in live}
            if not allowed:
                return []
            # a small candidate set is searched exactly (valkey-search's planner does the same with its
            # pre-filter); a large one inline, the graph asked to skip what the filter rejects
            if len(allowed) <= max(2000, 20 * k):
                return self._exact(query, k, allowed)
        k = min(k, len(live) if allowed is None else len(allowed))
        ef = self.ef_runtime if ef is None else ef
        index = self.index
        if ef != self.index.ef:
            index.set_ef(ef)
        try:
            if allowed is None:
                labels, dists = index.knn_query(query.reshape(1, -1), k=k)
            else:
                labels, dists = index.knn_query(query.reshape(1, -1), k=k, filter=allowed.__contains__)
        except RuntimeError:
            # hnswlib cannot return k results (a filter the graph's walk could not satisfy): exact instead
            return self._exact(query, k, allowed if allowed is not None else live)
        finally:
            if ef != self.ef_runtime:
                index.set_ef(self.ef_runtime)
        pairs = [(float(d), int(lb)) for d, lb in zip(dists[0], labels[0])]
        pairs.sort()
        return pairs

    def _exact(self, query, k, labels):
        labels = list(labels)
        vecs = self.vectors_of(labels)   # stored normalized for COSINE by hnswlib
        q = normalized(query) if self.metric == "COSINE" else query
        return top_k(labels, _distances(vecs, q, self.metric), k)

    def memory_bytes(self):
        # hnswlib's own layout: per element the vector, the level-0 links (2*M ids), a label and a few headers
        per = self.dim * 4 + 2 * self.attr.m * 4 + 8 + 16
        return int(self.capacity * per)


class TagIndex:
    """Tags of a key: the field split at SEPARATOR, each trimmed, empties dropped; compared case-insensitively
    unless CASESENSITIVE."""

    def __init__(self, attr):
        self.attr = attr
        self.separator = attr.separator.decode("latin-1")
        self.case_sensitive = attr.case_sensitive
        self.by_label = {}    # label -> frozenset of (folded) tags
        self.raw = {}         # label -> the field's bytes
        self.by_tag = {}      # folded tag -> set of labels

    def __len__(self):
        return len(self.by_label)

    def fold(self, tag: str) -> str:
        return tag if self.case_sensitive else tag.lower()

    def parse_record(self, data: bytes):
        s = data.decode("utf-8", "surrogateescape")
        return frozenset(self.fold(t.strip(" \t\n\v\f\r")) for t in s.split(self.separator)
                         if t.strip(" \t\n\v\f\r"))

    def set(self, label, data: bytes) -> bool:
        tags = self.parse_record(data)
        self.remove(label)
        if not tags:
            return False
        self.by_label[label] = tags
        self.raw[label] = data
        for t in tags:
            s = self.by_tag.get(t)
            if s is None:
                s = self.by_tag[t] = set()
            s.add(label)
        return True

    def remove(self, label):
        tags = self.by_label.pop(label, None)
        if tags is None:
            return
        self.raw.pop(label, None)
        for t in tags:
            s = self.by_tag.get(t)
            if s is not None:
                s.discard(label)
                if not s:
                    del self.by_tag[t]

    def match(self, tags):
        """Labels whose tags meet any of `tags` (a trailing '*' is a prefix)."""
        out = set()
        for t in tags:
            t = self.fold(t)
            if t.endswith("*"):
                p = t[:-1]
                for tag, labels in self.by_tag.items():
                    if tag.startswith(p):
                        out |= labels
            else:
                s = self.by_tag.get(t)
                if s:
                    out |= s
        return out

    def memory_bytes(self):
        return sum(len(v) for v in self.raw.values()) + 96 * len(self.by_label)


class NumericIndex:
    """Numbers of a key (absl::SimpleAtod's text: spaces allowed, nan refused), kept sorted for ranges."""

    def __init__(self, attr):
        self.attr = attr
        self.value = {}       # label -> float
        self.sorted = []      # (value, label), ascending

    def __len__(self):
        return len(self.value)

    def set(self, label, number) -> bool:
        self.remove(label)
        if number is None:
            return False
        self.value[label] = number
        bisect.insort(self.sorted, (number, label))
        return True

    def remove(self, label):
        old = self.value.pop(label, None)
        if old is None:
            return
        i = bisect.bisect_left(self.sorted, (old, label))
        if i < len(self.sorted) and self.sorted[i] == (old, label):
            del self.sorted[i]

    def range(self, lo, lo_incl, hi, hi_incl):
        s = self.sorted
        if lo_incl:
            i = bisect.bisect_left(s, (lo, -1))
        else:
            i = bisect.bisect_right(s, (lo, float("inf")))
        if hi_incl:
            j = bisect.bisect_right(s, (hi, float("inf")))
        else:
            j = bisect.bisect_left(s, (hi, -1))
        return {lb for _, lb in s[i:j]}

    def memory_bytes(self):
        return 80 * len(self.value)
