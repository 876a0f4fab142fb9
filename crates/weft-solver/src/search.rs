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
    let n = m.names.len();
    let total = setup.total;
    let must: Vec<Bits> = m
        .must
        .iter()
        .enumerate()
        .filter(|(i, _)| r.on(Unit::Must(*i)))
        .map(|(_, b)| *b)
        .collect();
    let cant: Vec<Bits> = m
        .cant
        .iter()
        .enumerate()
        .filter(|(i, _)| r.on(Unit::Cant(*i)))
        .map(|(_, b)| *b)
        .collect();
    let hw_new = m.hw_offered
        & m.compat_hw
            .filter(|_| r.on(Unit::CompatHw))
            .unwrap_or(Bits::MAX);
    let img_new = m.img_offered
        & m.compat_img
            .filter(|_| r.on(Unit::CompatImg))
            .unwrap_or(Bits::MAX);
    let mut base = vec![0u64; n];
    for c in &setup.existing {
        for s in ones(c.set) {
            base[s] += c.count;
        }
        if cant.iter().any(|k| k & c.set == *k) {
            return None;
        }
        if ones(c.set).any(|s| hw_of(m, r, s) & c.hw == 0 || img_of(m, r, s) & c.img == 0) {
            return None;
        }
        if r.on(Unit::CompatHw) && m.compat_hw.is_some_and(|h| h & c.hw == 0) {
            return None;
        }
        if r.on(Unit::CompatImg) && m.compat_img.is_some_and(|h| h & c.img == 0) {
            return None;
        }
        let decided = if c.open { !setup.place } else { Bits::MAX };
        if must
            .iter()
            .any(|k| k & decided == *k && c.set & k != 0 && c.set & k != *k)
        {
            return None;
        }
    }
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
        let in_rule = must.iter().chain(&cant).any(|k| k & bit(s) != 0);
        let unrestricted = hw_of(m, r, s) == Bits::MAX && img_of(m, r, s) == Bits::MAX;
        if !in_rule && unrestricted && hi >= total && lo <= have + open_count {
            free |= bit(s);
        }
    }
    // Union-find over the placed services, by the active must-coexist rules.
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(p: &mut [usize], x: usize) -> usize {
        let mut x = x;
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    let placed = setup.place & !free & all_bits(n);
    for k in &must {
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
    let mut atoms: Vec<Atom> = Vec::new();
    for g in groups.into_iter().filter(|g| *g != 0) {
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
        atoms.push(a);
    }
    atoms.sort_by_key(|a| (a.hi, std::cmp::Reverse(a.lo), a.members.trailing_zeros()));
    let mut decided = Vec::with_capacity(atoms.len());
    let mut d = !setup.place | free;
    for a in &atoms {
        d |= a.members;
        decided.push(d);
    }
    let mut later = vec![0; atoms.len()];
    let mut acc = 0;
    for i in (0..atoms.len()).rev() {
        later[i] = acc;
        acc |= atoms[i].members;
    }
    let mut classes: Vec<Class> = setup
        .existing
        .iter()
        .map(|c| Class {
            set: if c.open { c.set | free } else { c.set },
            ..c.clone()
        })
        .collect();
    if setup.fresh > 0 {
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
    Some(Problem {
        atoms,
        cant,
        must,
        decided,
        later,
        classes,
    })
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
        let p = self.p;
        if i == p.atoms.len() {
            return Ok(classes
                .iter()
                .all(|c| c.count == 0 || c.set != 0)
                .then_some(classes));
        }
        self.steps += 1;
        if self.steps > STEP_LIMIT {
            return Err(SolveError::SearchLimit { steps: STEP_LIMIT });
        }
        let mut key_classes = classes.clone();
        key_classes.sort();
        let key = (i, key_classes);
        if self.dead.contains(&key) {
            return Ok(None);
        }
        let a = &p.atoms[i];
        let decided = p.decided[i];
        let must_ok = |set: Bits| {
            p.must
                .iter()
                .all(|k| k & a.members == 0 || k & decided != *k || set & k == 0 || set & k == *k)
        };
        // Per class: the most it may take (ub) and the least it must take (forced).
        let mut ub = Vec::with_capacity(classes.len());
        let mut forced = Vec::with_capacity(classes.len());
        for c in &classes {
            let take = self.compatible(c, a.members, a.hw, a.img) && must_ok(c.set | a.members);
            let skip = !c.open || must_ok(c.set);
            match (take, skip) {
                (false, false) => {
                    self.dead.insert(key);
                    return Ok(None);
                }
                (true, false) => {
                    ub.push(c.count);
                    forced.push(c.count);
                }
                (true, true) => {
                    ub.push(c.count);
                    forced.push(0);
                }
                (false, true) => {
                    ub.push(0);
                    forced.push(0);
                }
            }
        }
        let cap: u64 = ub.iter().sum();
        let must_take: u64 = forced.iter().sum();
        let lo = a.lo.max(must_take);
        let hi = a.hi.min(cap);
        if lo > hi {
            self.dead.insert(key);
            return Ok(None);
        }
        let optional: Vec<u64> = ub.iter().zip(&forced).map(|(u, f)| u - f).collect();
        let harmless = !p
            .cant
            .iter()
            .chain(&p.must)
            .any(|k| k & a.members != 0 && k & p.later[i] != 0)
            && classes
                .iter()
                .zip(&ub)
                .all(|(c, u)| *u == 0 || (c.hw & a.hw == c.hw && c.img & a.img == c.img));
        if harmless {
            // Dominant choice: as many nodes as allowed, empty nodes first.
            let mut left = hi - must_take;
            let mut x = forced.clone();
            for pass_empty in [true, false] {
                for (j, c) in classes.iter().enumerate() {
                    if (c.set == 0) == pass_empty {
                        let t = optional[j].min(left);
                        x[j] += t;
                        left -= t;
                    }
                }
            }
            let next = split(&classes, &x, a);
            if !self.pruned(i + 1, &next) {
                if let Some(done) = self.run(i + 1, next)? {
                    return Ok(Some(done));
                }
            }
        } else {
            for t in (lo..=hi).rev() {
                let Some(mut dist) = Distributions::new(optional.clone(), t - must_take) else {
                    continue;
                };
                while let Some(x) = dist.next() {
                    self.steps += 1;
                    if self.steps > STEP_LIMIT {
                        return Err(SolveError::SearchLimit { steps: STEP_LIMIT });
                    }
                    let x: Vec<u64> = x.iter().zip(&forced).map(|(o, f)| o + f).collect();
                    let next = split(&classes, &x, a);
                    if self.pruned(i + 1, &next) {
                        continue;
                    }
                    if let Some(done) = self.run(i + 1, next)? {
                        return Ok(Some(done));
                    }
                }
            }
        }
        self.dead.insert(key);
        Ok(None)
    }
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
