"""The kinds of machine a :class:`~mesh.Topology` composes: how ranks sit on hosts, and how
hosts sit in fast domains, each in its regular and its listed form.

- :class:`EvenHosts`: ``world`` ranks, host ``h`` running ranks ``[h * n, (h + 1) * n)`` at
  devices ``0 .. n - 1`` (how ``torchrun`` numbers ranks node by node);
- :class:`ListedHosts`: runs ``(host, count, first device)`` of consecutive ranks in rank
  order (hosts of differing sizes, ranks not numbered host by host);
- :class:`EvenDomains`: host ``h`` in fast domain ``h // n`` (the last may be partial);
- :class:`ListedDomains`: runs ``(domain, hosts)`` of consecutive hosts in host order.

Pure, frozen values built only inside ``mesh._topology``, from fields checked and made
canonical (a listed form is never one the regular form can say); each answers its own
questions by arithmetic (the regular forms) or over its runs (the listed forms), so the
topology's queries do not branch on which form it holds.  Each holds only its own fields:
what one form lacks (a regular form's runs, a listed form's size per host) it does not
pretend to have; the topology asks which form it holds only where its answer differs in
kind (``devices_per_host`` is None for listed hosts; the saved data holds runs or a size).

>>> hosts = ListedHosts(((0, 2, 0), (1, 3, 0), (0, 1, 2)))
>>> hosts.num_hosts, hosts.host(5), hosts.device(5), hosts.ranks_on(0)
(2, 0, 2, (0, 1, 5))
>>> EvenDomains(3, 7).hosts_in(2), EvenDomains(3, 7).num_domains
((6,), 3)
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Iterator

import attrs

__all__ = ["Domains", "EvenDomains", "EvenHosts", "Hosts", "ListedDomains", "ListedHosts",
           "Runs", "Stretch"]

Runs = tuple[tuple[int, ...], ...]  # (host, count, first device) or (domain, hosts) runs
Stretch = tuple[int, int, int]  # (first rank, end, label): consecutive ranks on one block


# ---- how hosts sit in fast domains ----------------------------------------------------------
@attrs.frozen
class EvenDomains:
    """Domains of ``per_domain`` consecutive hosts over ``hosts`` hosts (the last partial)."""

    per_domain: int
    hosts: int

    in_order = True

    @property
    def key(self) -> int:
        """What equality compares: more hosts per domain than there are hosts is one domain."""
        return min(self.per_domain, self.hosts)

    @property
    def num_domains(self) -> int:
        return -(-self.hosts // self.per_domain)

    def domain_of(self, host: int) -> int:
        return host // self.per_domain

    def hosts_in(self, domain: int) -> tuple[int, ...]:
        f = self.per_domain
        return tuple(range(domain * f, min((domain + 1) * f, self.hosts)))

    def host_runs(self) -> Iterator[Stretch]:
        """``(first host, end, domain)`` of every domain, in host order."""
        f = self.per_domain
        for d in range(self.num_domains):
            yield d * f, min((d + 1) * f, self.hosts), d

    def sizes_of_even_hosts(self, per_host: int) -> tuple[int, ...]:
        """The distinct numbers of ranks a domain holds, hosts of ``per_host`` ranks each."""
        last = self.hosts % self.per_domain
        whole = {per_host * self.key}
        return tuple(sorted(whole | ({per_host * last} if last and last < self.per_domain
                                     else set())))


@attrs.frozen
class ListedDomains:
    """Runs ``(domain, hosts)`` of consecutive hosts in host order, domains numbered by first
    appearance (canonical: never what :class:`EvenDomains` can say)."""

    runs: Runs

    @property
    def key(self) -> Runs:
        """What equality compares: the runs (canonical)."""
        return self.runs

    @functools.cached_property
    def num_domains(self) -> int:
        return max(d for d, _ in self.runs) + 1

    @functools.cached_property
    def _starts(self) -> tuple[int, ...]:
        """The first host of every run."""
        return tuple(itertools.accumulate((c for _, c in self.runs), initial=0))

    @property
    def in_order(self) -> bool:
        return len(self.runs) == self.num_domains

    def domain_of(self, host: int) -> int:
        return self.runs[bisect.bisect_right(self._starts, host) - 1][0]

    def hosts_in(self, domain: int) -> tuple[int, ...]:
        return tuple([h for (on, c), s in zip(self.runs, self._starts) if on == domain
                      for h in range(s, s + c)])

    def host_runs(self) -> Iterator[Stretch]:
        """``(first host, end, domain)`` of every run, in host order."""
        for (d, c), s in zip(self.runs, self._starts):
            yield s, s + c, d

    def sizes_of_even_hosts(self, per_host: int) -> tuple[int, ...]:
        per_domain = [0] * self.num_domains
        for d, c in self.runs:
            per_domain[d] += c * per_host
        return tuple(sorted(set(per_domain)))


Domains = EvenDomains | ListedDomains


# ---- how ranks sit on hosts -------------------------------------------------------------------
@attrs.frozen
class EvenHosts:
    """``world`` ranks on hosts of ``per_host`` each: rank ``r`` on host ``r // per_host``."""

    world: int
    per_host: int

    in_order = True

    @property
    def num_hosts(self) -> int:
        return self.world // self.per_host

    def host(self, rank: int) -> int:
        return rank // self.per_host

    def device(self, rank: int) -> int:
        return rank % self.per_host

    def host_size(self, host: int) -> int:
        return self.per_host

    def ranks_on(self, host: int) -> tuple[int, ...]:
        return tuple(range(host * self.per_host, (host + 1) * self.per_host))

    def host_counts(self) -> Iterator[tuple[int, int]]:
        """``(host, ranks)`` of every stretch of consecutive ranks on one host, in rank order."""
        return ((h, self.per_host) for h in range(self.num_hosts))

    def stretches(self, domains: Domains | None) -> Iterator[Stretch]:
        """``(first rank, end, host)`` of every host (``domains``: ``(.., .., domain)`` of every
        run of hosts in one domain), in rank order: O(1) per item, whatever the sizes."""
        p = self.per_host
        if domains is None:
            return ((h * p, (h + 1) * p, h) for h in range(self.num_hosts))
        return ((a * p, b * p, d) for a, b, d in domains.host_runs())

    def sizes(self, domains: Domains) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (self.per_host,), domains.sizes_of_even_hosts(self.per_host)

    def rank_lists(self) -> list[list[int]]:
        """Every host's ranks, ascending, by host."""
        p = self.per_host
        return [list(range(h * p, (h + 1) * p)) for h in range(self.num_hosts)]


@attrs.frozen
class ListedHosts:
    """Runs ``(host, count, first device)`` of consecutive ranks in rank order, hosts numbered
    by first appearance (canonical: never what :class:`EvenHosts` can say)."""

    runs: Runs

    @functools.cached_property
    def num_hosts(self) -> int:
        return max(h for h, _, _ in self.runs) + 1

    @functools.cached_property
    def _starts(self) -> tuple[int, ...]:
        """The first rank of every run."""
        return tuple(itertools.accumulate((c for _, c, _ in self.runs), initial=0))

    @functools.cached_property
    def _host_sizes(self) -> tuple[int, ...]:
        sizes = [0] * self.num_hosts
        for h, c, _ in self.runs:
            sizes[h] += c
        return tuple(sizes)

    @property
    def in_order(self) -> bool:
        """One run per host (hosts are numbered by first appearance: then in order)."""
        return len(self.runs) == self.num_hosts

    def host(self, rank: int) -> int:
        return self.runs[bisect.bisect_right(self._starts, rank) - 1][0]

    def device(self, rank: int) -> int:
        i = bisect.bisect_right(self._starts, rank) - 1
        return self.runs[i][2] + rank - self._starts[i]

    def host_size(self, host: int) -> int:
        return self._host_sizes[host]

    def ranks_on(self, host: int) -> tuple[int, ...]:
        return tuple([r for (on, c, _), s in zip(self.runs, self._starts) if on == host
                      for r in range(s, s + c)])

    def host_counts(self) -> Iterator[tuple[int, int]]:
        return ((h, c) for h, c, _ in self.runs)

    def stretches(self, domains: Domains | None) -> Iterator[Stretch]:
        """``(first rank, end, host)`` of every run (``domains``: labelled by its domain)."""
        for (h, c, _), s in zip(self.runs, self._starts):
            yield s, s + c, h if domains is None else domains.domain_of(h)

    def sizes(self, domains: Domains) -> tuple[tuple[int, ...], tuple[int, ...]]:
        per_domain = [0] * domains.num_domains
        for host, size in enumerate(self._host_sizes):
            per_domain[domains.domain_of(host)] += size
        return tuple(sorted(set(self._host_sizes))), tuple(sorted(set(per_domain)))

    def rank_lists(self) -> list[list[int]]:
        on: list[list[int]] = [[] for _ in range(self.num_hosts)]
        for (h, c, _), start in zip(self.runs, self._starts):
            on[h].extend(range(start, start + c))
        return on


Hosts = EvenHosts | ListedHosts
