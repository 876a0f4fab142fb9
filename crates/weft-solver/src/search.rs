//! The complete search. Nodes are kept as *classes* (a service set, allowed hardware and image bit
//! sets, and a node count), never one by one, so the work depends on the number of distinct node
//! shapes, not on the cluster size.
//!
//! Services that must coexist are merged into *atoms*. Atoms are placed one at a time, most
//! constrained first (smallest max, then largest min, then name). Placing an atom picks how many
//! nodes of each class receive it, which splits classes. Every distribution is tried (depth first,
//! most nodes first, then earlier classes first), except where one choice provably dominates the
//! others (an atom that cannot hinder any later atom simply goes on as many nodes as it may, empty
//! nodes first). Dead states are remembered, and two cheap bounds prune: each later atom must still
//! reach its min, and the nodes still empty must be coverable by the later atoms' maxes.

use std::collections::HashSet;

use crate::model::{all_bits, bit, ones, Bits, Model, Relax, Unit};
use crate::SolveError;

/// How many search steps one solve may take before giving up.
pub const STEP_LIMIT: u64 = 2_000_000;

/// A group of identical nodes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Class {
    pub set: Bits,
    pub hw: Bits,
    pub img: Bits,
    /// Open classes receive services; closed ones (existing nodes in an expand) do not.
    pub open: bool,
    /// Which initial class these nodes came from.
    pub origin: usize,
    pub count: u64,
}

/// The operation-specific starting point of a search.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    /// Cluster size after the change.
    pub total: u64,
    /// Existing nodes grouped by shape (`hw`/`img` are single bits).
    pub existing: Vec<Class>,
    /// How many new nodes to lay out.
    pub fresh: u64,
    /// The services the search decides; the others stay where they are.
    pub place: Bits,
}

#[derive(Debug, Clone)]
struct Atom {
    members: Bits,
    lo: u64,
    hi: u64,
    hw: Bits,
    img: Bits,
}

#[derive(Debug)]
struct Problem {
    atoms: Vec<Atom>,
    cant: Vec<Bits>,
    must: Vec<Bits>,
    /// Services decided once atom i is placed.
    decided: Vec<Bits>,
    /// Members of the atoms after atom i.
    later: Vec<Bits>,
    classes: Vec<Class>,
}

fn lo_of(m: &Model, r: &Relax, s: usize) -> u64 {
    let rule = &m.rules[s];
    if r.on(Unit::Min(s)) && rule.max > 0 {
        rule.min.max(1)
    } else {
        0
    }
}

fn hi_of(m: &Model, r: &Relax, s: usize, total: u64) -> u64 {
    if r.on(Unit::Max(s)) {
        m.rules[s].max.min(total)
    } else {
        total
    }
}

fn hw_of(m: &Model, r: &Relax, s: usize) -> Bits {
    m.rules[s]
        .hw
        .filter(|_| r.on(Unit::Hw(s)))
        .unwrap_or(Bits::MAX)
}

fn img_of(m: &Model, r: &Relax, s: usize) -> Bits {
    m.rules[s]
        .img
        .filter(|_| r.on(Unit::Img(s)))
        .unwrap_or(Bits::MAX)
}

/// Builds the search problem; `None` when the fixed part (existing nodes) already breaks a rule.
fn compile(m: &Model, r: &Relax, setup: &Setup) -> Option<Problem> {
    let must = active(&m.must, |i| r.on(Unit::Must(i)));
    let cant = active(&m.cant, |i| r.on(Unit::Cant(i)));
    let fits = |c: &Class| existing_fits(m, r, setup, c, &must, &cant);
    if !setup.existing.iter().all(fits) {
        return None;
    }
    let base = service_counts(m.names.len(), &setup.existing);
    let free = free_services(m, r, setup, &base, &must, &cant)?;
    let placed = setup.place & !free & all_bits(m.names.len());
    let atoms = atoms(m, r, setup.total, &base, placed, &must);
    let (decided, later) = decided_and_later(&atoms, !setup.place | free);
    let classes = start_classes(m, r, setup, free)?;
    Some(Problem {
        atoms,
        cant,
        must,
        decided,
        later,
        classes,
    })
}

/// The coexistence rules (`rules[i]`) that `on(i)` keeps.
fn active(rules: &[Bits], on: impl Fn(usize) -> bool) -> Vec<Bits> {
    rules
        .iter()
        .enumerate()
        .filter(|(i, _)| on(*i))
        .map(|(_, b)| *b)
        .collect()
}

/// Whether a class of existing nodes keeps the active rules: no can't-coexist set whole, every
/// service's (and the template's) hardware and image allowed, and no must-coexist set split
/// among the services the search does not decide there.
fn existing_fits(
    m: &Model,
    r: &Relax,
    setup: &Setup,
    c: &Class,
    must: &[Bits],
    cant: &[Bits],
) -> bool {
    if cant.iter().any(|k| k & c.set == *k) {
        return false;
    }
    if ones(c.set).any(|s| hw_of(m, r, s) & c.hw == 0 || img_of(m, r, s) & c.img == 0) {
        return false;
    }
    if r.on(Unit::CompatHw) && m.compat_hw.is_some_and(|h| h & c.hw == 0) {
        return false;
    }
    if r.on(Unit::CompatImg) && m.compat_img.is_some_and(|h| h & c.img == 0) {
        return false;
    }
    let decided = if c.open { !setup.place } else { Bits::MAX };
    !must
        .iter()
        .any(|k| k & decided == *k && c.set & k != 0 && c.set & k != *k)
}

/// How many existing nodes have each service.
fn service_counts(n: usize, existing: &[Class]) -> Vec<u64> {
    let mut base = vec![0u64; n];
    for c in existing {
        for s in ones(c.set) {
            base[s] += c.count;
        }
    }
    base
}

/// The placed services that no rule restricts, which simply go on every open node; `None` when a
/// service's count on existing nodes already breaks its bounds (`base`: those counts).
fn free_services(
    m: &Model,
    r: &Relax,
    setup: &Setup,
    base: &[u64],
    must: &[Bits],
    cant: &[Bits],
) -> Option<Bits> {
    let total = setup.total;
    let open_count: u64 = setup
        .existing
        .iter()
        .filter(|c| c.open)
        .map(|c| c.count)
        .sum::<u64>()
        + setup.fresh;
    let mut free: Bits = 0;
    for (s, &have) in base.iter().enumerate() {
        let lo = lo_of(m, r, s);
        let hi = hi_of(m, r, s, total);
        if setup.place & bit(s) == 0 {
            if have < lo || have > hi {
                return None;
            }
            continue;
        }
        if have > hi {
            return None;
        }
        let in_rule = must.iter().chain(cant).any(|k| k & bit(s) != 0);
        let unrestricted = hw_of(m, r, s) == Bits::MAX && img_of(m, r, s) == Bits::MAX;
        if !in_rule && unrestricted && hi >= total && lo <= have + open_count {
            free |= bit(s);
        }
    }
    Some(free)
}

/// The `placed` services merged into atoms by the active must-coexist rules, each with the
/// bounds and types all its members allow, most constrained first.
fn atoms(m: &Model, r: &Relax, total: u64, base: &[u64], placed: Bits, must: &[Bits]) -> Vec<Atom> {
    let mut atoms: Vec<Atom> = coexisting_groups(m.names.len(), placed, must)
        .into_iter()
        .map(|g| {
            let mut a = Atom {
                members: g,
                lo: 0,
                hi: total,
                hw: Bits::MAX,
                img: Bits::MAX,
            };
            for s in ones(g) {
                a.lo = a.lo.max(lo_of(m, r, s).saturating_sub(base[s]));
                a.hi = a.hi.min(hi_of(m, r, s, total) - base[s]);
                a.hw &= hw_of(m, r, s);
                a.img &= img_of(m, r, s);
            }
            a
        })
        .collect();
    atoms.sort_by_key(|a| (a.hi, std::cmp::Reverse(a.lo), a.members.trailing_zeros()));
    atoms
}

/// The `placed` services grouped by the must-coexist rules (union-find), in order of their
/// smallest member.
fn coexisting_groups(n: usize, placed: Bits, must: &[Bits]) -> Vec<Bits> {
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(p: &mut [usize], x: usize) -> usize {
        let mut x = x;
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    for k in must {
        let members: Vec<usize> = ones(k & placed).collect();
        for w in members.windows(2) {
            let (a, b) = (find(&mut parent, w[0]), find(&mut parent, w[1]));
            parent[a.max(b)] = a.min(b);
        }
    }
    let mut groups: Vec<Bits> = vec![0; n];
    for s in ones(placed) {
        let root = find(&mut parent, s);
        groups[root] |= bit(s);
    }
    groups.into_iter().filter(|g| *g != 0).collect()
}

/// Per atom: the services decided once it is placed (starting from `decided`), and the members
/// of the atoms after it.
fn decided_and_later(atoms: &[Atom], decided: Bits) -> (Vec<Bits>, Vec<Bits>) {
    let mut d = decided;
    let decided = atoms
        .iter()
        .map(|a| {
            d |= a.members;
            d
        })
        .collect();
    let mut later = vec![0; atoms.len()];
    let mut acc = 0;
    for i in (0..atoms.len()).rev() {
        later[i] = acc;
        acc |= atoms[i].members;
    }
    (decided, later)
}

/// The classes the search starts from: the existing ones (open ones with the free services),
/// and one of the fresh nodes; `None` when fresh nodes have no hardware or image to use.
fn start_classes(m: &Model, r: &Relax, setup: &Setup, free: Bits) -> Option<Vec<Class>> {
    let mut classes: Vec<Class> = setup
        .existing
        .iter()
        .map(|c| Class {
            set: if c.open { c.set | free } else { c.set },
            ..c.clone()
        })
        .collect();
    if setup.fresh > 0 {
        let hw_new = m.hw_offered
            & m.compat_hw
                .filter(|_| r.on(Unit::CompatHw))
                .unwrap_or(Bits::MAX);
        let img_new = m.img_offered
            & m.compat_img
                .filter(|_| r.on(Unit::CompatImg))
                .unwrap_or(Bits::MAX);
        if hw_new == 0 || img_new == 0 {
            return None;
        }
        classes.push(Class {
            set: free,
            hw: hw_new,
            img: img_new,
            open: true,
            origin: setup.existing.len(),
            count: setup.fresh,
        });
    }
    Some(classes)
}

/// Solves with the given constraints switched off. `Ok(None)`: no layout exists.
pub(crate) fn solve(m: &Model, r: &Relax, setup: &Setup) -> Result<Option<Vec<Class>>, SolveError> {
    let Some(p) = compile(m, r, setup) else {
        return Ok(None);
    };
    let mut dfs = Dfs {
        p: &p,
        steps: 0,
        dead: HashSet::new(),
    };
    let start = p.classes.clone();
    if dfs.pruned(0, &start) {
        return Ok(None);
    }
    dfs.run(0, start)
}

struct Dfs<'p> {
    p: &'p Problem,
    steps: u64,
    dead: HashSet<(usize, Vec<Class>)>,
}

/// Descending-lexicographic distributions of `total` over slots with upper bounds `ub`.
struct Distributions {
    ub: Vec<u64>,
    x: Vec<u64>,
    started: bool,
}

impl Distributions {
    fn new(ub: Vec<u64>, total: u64) -> Option<Self> {
        if ub.iter().sum::<u64>() < total {
            return None;
        }
        let mut x = vec![0; ub.len()];
        fill(&ub, &mut x, 0, total);
        Some(Distributions {
            ub,
            x,
            started: false,
        })
    }

    fn next(&mut self) -> Option<&[u64]> {
        if !self.started {
            self.started = true;
            return Some(&self.x);
        }
        let k = self.x.len();
        let mut rest = 0u64;
        let mut room = 0u64;
        for j in (0..k).rev() {
            if self.x[j] > 0 && rest < room {
                self.x[j] -= 1;
                fill(&self.ub, &mut self.x, j + 1, rest + 1);
                return Some(&self.x);
            }
            rest += self.x[j];
            room += self.ub[j];
        }
        None
    }
}

fn fill(ub: &[u64], x: &mut [u64], from: usize, mut total: u64) {
    for j in from..x.len() {
        x[j] = ub[j].min(total);
        total -= x[j];
    }
}

impl Dfs<'_> {
    fn compatible(&self, c: &Class, members: Bits, hw: Bits, img: Bits) -> bool {
        c.open
            && c.hw & hw != 0
            && c.img & img != 0
            && !self
                .p
                .cant
                .iter()
                .any(|k| k & members != 0 && k & (c.set | members) == *k)
    }

    /// Cheap necessary conditions for atoms `i..` to be placeable on `classes`.
    fn pruned(&self, i: usize, classes: &[Class]) -> bool {
        let empty: u64 = classes.iter().filter(|c| c.set == 0).map(|c| c.count).sum();
        let mut cover = 0u64;
        for a in &self.p.atoms[i..] {
            let mut cap = 0u64;
            let mut on_empty = false;
            for c in classes
                .iter()
                .filter(|c| self.compatible(c, a.members, a.hw, a.img))
            {
                cap += c.count;
                on_empty |= c.set == 0;
            }
            if cap < a.lo {
                return true;
            }
            if on_empty {
                cover = cover.saturating_add(a.hi.min(empty));
            }
        }
        cover < empty
    }

    fn run(&mut self, i: usize, classes: Vec<Class>) -> Result<Option<Vec<Class>>, SolveError> {
        if i == self.p.atoms.len() {
            return Ok(classes
                .iter()
                .all(|c| c.count == 0 || c.set != 0)
                .then_some(classes));
        }
        self.step()?;
        let mut key_classes = classes.clone();
        key_classes.sort();
        let key = (i, key_classes);
        if self.dead.contains(&key) {
            return Ok(None);
        }
        let found = match self.limits(i, &classes) {
            Some(limits) => self.place(i, &classes, &limits)?,
            None => None,
        };
        if found.is_none() {
            self.dead.insert(key);
        }
        Ok(found)
    }

    /// Counts a search step; fails past the limit.
    fn step(&mut self) -> Result<(), SolveError> {
        self.steps += 1;
        if self.steps > STEP_LIMIT {
            return Err(SolveError::SearchLimit { steps: STEP_LIMIT });
        }
        Ok(())
    }

    /// How atom `i` may go on `classes`; `None` when it cannot.
    fn limits(&self, i: usize, classes: &[Class]) -> Option<Limits> {
        let p = self.p;
        let a = &p.atoms[i];
        let decided = p.decided[i];
        let must_ok = |set: Bits| {
            p.must
                .iter()
                .all(|k| k & a.members == 0 || k & decided != *k || set & k == 0 || set & k == *k)
        };
        let mut ub = Vec::with_capacity(classes.len());
        let mut forced = Vec::with_capacity(classes.len());
        for c in classes {
            let take = self.compatible(c, a.members, a.hw, a.img) && must_ok(c.set | a.members);
            let skip = !c.open || must_ok(c.set);
            let (most, least) = match (take, skip) {
                (false, false) => return None,
                (true, false) => (c.count, c.count),
                (true, true) => (c.count, 0),
                (false, true) => (0, 0),
            };
            ub.push(most);
            forced.push(least);
        }
        let cap: u64 = ub.iter().sum();
        let must_take: u64 = forced.iter().sum();
        let lo = a.lo.max(must_take);
        let hi = a.hi.min(cap);
        (lo <= hi).then_some(Limits {
            ub,
            forced,
            must_take,
            lo,
            hi,
        })
    }

    /// Tries the distributions of atom `i` over `classes` within `l`, searching on from each.
    fn place(
        &mut self,
        i: usize,
        classes: &[Class],
        l: &Limits,
    ) -> Result<Option<Vec<Class>>, SolveError> {
        let optional: Vec<u64> = l.ub.iter().zip(&l.forced).map(|(u, f)| u - f).collect();
        if self.harmless(i, classes, &l.ub) {
            let x = dominant(classes, &l.forced, &optional, l.hi - l.must_take);
            return self.descend(i, classes, &x);
        }
        for t in (l.lo..=l.hi).rev() {
            let Some(mut dist) = Distributions::new(optional.clone(), t - l.must_take) else {
                continue;
            };
            while let Some(x) = dist.next() {
                self.step()?;
                let x: Vec<u64> = x.iter().zip(&l.forced).map(|(o, f)| o + f).collect();
                if let Some(done) = self.descend(i, classes, &x)? {
                    return Ok(Some(done));
                }
            }
        }
        Ok(None)
    }

    /// Whether atom `i` cannot hinder any later atom (no rule ties it to them, and every class it
    /// may go on already has only types it allows): then one choice dominates the others.
    fn harmless(&self, i: usize, classes: &[Class], ub: &[u64]) -> bool {
        let p = self.p;
        let a = &p.atoms[i];
        !p.cant
            .iter()
            .chain(&p.must)
            .any(|k| k & a.members != 0 && k & p.later[i] != 0)
            && classes
                .iter()
                .zip(ub)
                .all(|(c, u)| *u == 0 || (c.hw & a.hw == c.hw && c.img & a.img == c.img))
    }

    /// Gives atom `i` to `x[j]` nodes of each class j and searches on, unless the bounds prune.
    fn descend(
        &mut self,
        i: usize,
        classes: &[Class],
        x: &[u64],
    ) -> Result<Option<Vec<Class>>, SolveError> {
        let next = split(classes, x, &self.p.atoms[i]);
        if self.pruned(i + 1, &next) {
            return Ok(None);
        }
        self.run(i + 1, next)
    }
}

/// How an atom may go on the classes: per class the most it may take (`ub`) and the least it must
/// (`forced`, `must_take` in all), and how many nodes it goes on in all (`lo..=hi`).
struct Limits {
    ub: Vec<u64>,
    forced: Vec<u64>,
    must_take: u64,
    lo: u64,
    hi: u64,
}

/// The dominant choice for a harmless atom: `forced`, plus as many of the `optional` nodes as
/// `left` allows, empty nodes first.
fn dominant(classes: &[Class], forced: &[u64], optional: &[u64], mut left: u64) -> Vec<u64> {
    let mut x = forced.to_vec();
    for pass_empty in [true, false] {
        for (j, c) in classes.iter().enumerate() {
            if (c.set == 0) == pass_empty {
                let t = optional[j].min(left);
                x[j] += t;
                left -= t;
            }
        }
    }
    x
}

/// Gives atom `a` to `x[j]` nodes of class j; merges classes that end up identical.
fn split(classes: &[Class], x: &[u64], a: &Atom) -> Vec<Class> {
    let mut out: Vec<Class> = Vec::with_capacity(classes.len() + 2);
    let mut push = |c: Class| {
        if c.count == 0 {
            return;
        }
        match out.iter_mut().find(|o| {
            (o.set, o.hw, o.img, o.open, o.origin) == (c.set, c.hw, c.img, c.open, c.origin)
        }) {
            Some(o) => o.count += c.count,
            None => out.push(c),
        }
    };
    for (c, &xj) in classes.iter().zip(x) {
        push(Class {
            set: c.set | a.members,
            hw: c.hw & a.hw,
            img: c.img & a.img,
            count: xj,
            ..c.clone()
        });
        push(Class {
            count: c.count - xj,
            ..c.clone()
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_are_descending_lex_and_complete() {
        let mut d = Distributions::new(vec![2, 1, 2], 3).unwrap();
        let mut seen = Vec::new();
        while let Some(x) = d.next() {
            seen.push(x.to_vec());
        }
        assert_eq!(
            seen,
            vec![
                vec![2, 1, 0],
                vec![2, 0, 1],
                vec![1, 1, 1],
                vec![1, 0, 2],
                vec![0, 1, 2]
            ]
        );
        assert!(Distributions::new(vec![1, 1], 3).is_none());
    }
}
