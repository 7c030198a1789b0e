"""Sorted set: a dict member->score plus a sorted list of (score, member) for ranges and ranks."""

from bisect import bisect_left, bisect_right, insort
from math import copysign
from operator import itemgetter

_member_of = itemgetter(1)


class ZSet:
    __slots__ = ("scores", "order")

    def __init__(self):
        self.scores = {}
        self.order = []  # sorted (score, member)

    def __len__(self):
        return len(self.scores)

    def __contains__(self, member):
        return member in self.scores

    def __iter__(self):
        return iter(self.order)

    def add(self, member: bytes, score: float) -> bool:
        """Sets member's score; returns True if the member is new."""
        old = self.scores.get(member)
        if old is not None:
            if old == score:
                return False
            del self.order[bisect_left(self.order, (old, member))]
            self.scores[member] = score
            insort(self.order, (score, member))
            return False
        self.scores[member] = score
        insort(self.order, (score, member))
        return True

    def remove(self, member: bytes) -> bool:
        score = self.scores.pop(member, None)
        if score is None:
            return False
        del self.order[bisect_left(self.order, (score, member))]
        return True

    def score(self, member):
        return self.scores.get(member)

    def unsign_zeros(self, members):
        """Scores -0 of these members become 0: what a listpack keeps (it writes a score as text, and "-0" as
        the integer 0); a skiplist keeps the sign. Only the score's sign changes, never the order."""
        scores, order = self.scores, self.order
        for member in members:
            s = scores.get(member)
            if s == 0.0 and copysign(1.0, s) < 0:
                scores[member] = 0.0
                order[bisect_left(order, (0.0, member))] = (0.0, member)

    def rank(self, member):
        score = self.scores.get(member)
        if score is None:
            return None
        return bisect_left(self.order, (score, member))

    def score_bounds(self, lo, lo_excl, hi, hi_excl):
        """Index range [i, j) of items with lo (<|<=) score (<|<=) hi."""
        order = self.order
        if lo_excl:
            i = bisect_right(order, (lo, _MAX_MEMBER))
        else:
            i = bisect_left(order, (lo, b""))
        if hi_excl:
            j = bisect_left(order, (hi, b""))
        else:
            j = bisect_right(order, (hi, _MAX_MEMBER))
        return i, max(i, j)

    def lex_bounds(self, lo, lo_excl, hi, hi_excl):
        """Index range [i, j) by member, valid when all scores are equal (Valkey's lex ranges).
        lo/hi are bytes, or None for -/+ infinity. O(log n): bisects the order on its members."""
        order = self.order
        if lo is None:
            i = 0
        elif lo_excl:
            i = bisect_right(order, lo, key=_member_of)
        else:
            i = bisect_left(order, lo, key=_member_of)
        if hi is None:
            j = len(order)
        elif hi_excl:
            j = bisect_left(order, hi, lo=i, key=_member_of)
        else:
            j = bisect_right(order, hi, lo=i, key=_member_of)
        return i, max(i, j)

    def rev_rank(self, member):
        rank = self.rank(member)
        return None if rank is None else len(self.order) - 1 - rank

    def delete_slice(self, i: int, j: int):
        """Removes the items with rank in [i, j); returns them as (score, member) in rank order."""
        order = self.order
        removed = order[i:j]
        if removed:
            del order[i:j]
            scores = self.scores
            for _, member in removed:
                del scores[member]
        return removed

    def pop(self, count: int, from_max: bool):
        """Removes up to count lowest (or highest) items; returns them lowest (highest) first."""
        n = len(self.order)
        if count >= n:
            items = self.order
            self.order = []
            self.scores = {}
        elif from_max:
            items = self.delete_slice(n - count, n)
        else:
            items = self.delete_slice(0, count)
        if from_max:
            items.reverse()
        return items

    @classmethod
    def from_scores(cls, scores: dict):
        """A sorted set owning `scores` (member -> float, no NaN)."""
        z = cls()
        z.scores = scores
        z.order = sorted([(s, m) for m, s in scores.items()])
        return z

    def copy(self):
        z = ZSet()
        z.scores = dict(self.scores)
        z.order = list(self.order)
        return z


class _MaxMember(bytes):
    """Compares greater than every member, for bisecting just past a score."""

    def __lt__(self, other):
        return False

    def __gt__(self, other):
        return True

    def __le__(self, other):
        return self is other

    def __ge__(self, other):
        return True

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    __hash__ = bytes.__hash__


_MAX_MEMBER = _MaxMember()
