//! Showback: what clusters accrued over a period (`GET /v2/costs`), from the cost spans their
//! bodies keep (each priced node's time in the cluster at the price in force when it was added;
//! see `body::CostSpan`), grouped per cluster, template or tenant, with a series per day.
//!
//! Sums are exact: micro-units times milliseconds, divided once per line.

use std::collections::BTreeMap;

use weft_model::cost::{format_micros, CostGroupBy, CostLine, CostPoint, CostReport};

use crate::body::{from_body, ClusterBody};
use crate::error::EngineResult;
use crate::ids::cluster_id_text;
use crate::{Caller, Engine};

const HOUR_MS: u128 = 3_600_000;
const DAY_MS: i64 = 86_400_000;
const MAX_DAYS: i64 = 366;

/// `micros_per_hour` over the part of `[start, end)` inside `[from, to)`, in micro-unit
/// milliseconds.
fn accrued(micros_per_hour: u64, start: i64, end: i64, from: i64, to: i64) -> u128 {
    let (a, b) = (start.max(from), end.min(to));
    if b <= a {
        return 0;
    }
    u128::from(micros_per_hour) * (b - a) as u128
}

/// The report of what `who` may see accrued over `[from, to)` (`to` defaults to `now`; a tenant
/// report needs an admin, a report across tenants the superadmin).
pub async fn report(
    st: &Engine,
    who: &Caller,
    from: i64,
    to: Option<i64>,
    group_by: CostGroupBy,
) -> EngineResult<CostReport> {
    let now = st.now_ms();
    let to = to.unwrap_or(now);
    if to <= from {
        return Ok(assemble(
            from,
            to,
            group_by,
            BTreeMap::new(),
            BTreeMap::new(),
        ));
    }
    // A series per day for periods up to a year; a longer period gets its lines only.
    let daily = (to - from) / DAY_MS <= MAX_DAYS;
    let mut lines: BTreeMap<(String, String), (Option<String>, u128)> = BTreeMap::new();
    let mut days: BTreeMap<(i64, String), u128> = BTreeMap::new();
    for (tenant, row) in clusters(st, who, group_by).await? {
        let body: ClusterBody = from_body(&row.body)?;
        let Some(currency) = body.currency.clone() else {
            continue;
        };
        let (key, name) = match group_by {
            CostGroupBy::Cluster => (cluster_id_text(row.id), Some(row.name.clone())),
            CostGroupBy::Template => (body.template.name.clone(), None),
            CostGroupBy::Tenant => (tenant.clone(), None),
        };
        for span in &body.cost_spans {
            let end = span.end.unwrap_or(now);
            let total = accrued(span.micros_per_hour, span.start, end, from, to);
            if total == 0 {
                continue;
            }
            let line = lines
                .entry((key.clone(), currency.clone()))
                .or_insert((name.clone(), 0));
            line.1 += total;
            let mut day = from - from.rem_euclid(DAY_MS);
            while daily && day < to {
                let part = accrued(
                    span.micros_per_hour,
                    span.start,
                    end,
                    day.max(from),
                    (day + DAY_MS).min(to),
                );
                if part > 0 {
                    *days.entry((day, currency.clone())).or_default() += part;
                }
                day += DAY_MS;
            }
        }
    }
    Ok(assemble(from, to, group_by, lines, days))
}

/// The clusters a report covers, with their tenant's name.
async fn clusters(
    st: &Engine,
    who: &Caller,
    group_by: CostGroupBy,
) -> EngineResult<Vec<(String, weft_store::ClusterRow)>> {
    if group_by == CostGroupBy::Tenant && who.is_admin() && who.tenant.id == weft_store::SUPERADMIN
    {
        who.require_superadmin()?;
        let mut out = Vec::new();
        for t in st.store.list_tenants().await? {
            for row in st.store.list_clusters(&t.id, None).await? {
                out.push((t.spec.name.clone(), row));
            }
        }
        return Ok(out);
    }
    let owner = (!who.is_admin()).then_some(who.user.as_str());
    let rows = st.store.list_clusters(&who.tenant.id, owner).await?;
    Ok(rows
        .into_iter()
        .map(|r| (who.tenant.spec.name.clone(), r))
        .collect())
}

fn micros(micro_ms: u128) -> u64 {
    u64::try_from((micro_ms + HOUR_MS / 2) / HOUR_MS).unwrap_or(u64::MAX)
}

fn line(key: String, name: Option<String>, currency: String, m: u64) -> CostLine {
    CostLine {
        key,
        name,
        currency,
        amount: format_micros(m),
        micros: m,
    }
}

fn assemble(
    from: i64,
    to: i64,
    group_by: CostGroupBy,
    lines: BTreeMap<(String, String), (Option<String>, u128)>,
    days: BTreeMap<(i64, String), u128>,
) -> CostReport {
    let mut totals: BTreeMap<String, u128> = BTreeMap::new();
    let mut out: Vec<CostLine> = lines
        .into_iter()
        .map(|((key, currency), (name, total))| {
            *totals.entry(currency.clone()).or_default() += total;
            line(key, name, currency, micros(total))
        })
        .collect();
    out.sort_by(|a, b| b.micros.cmp(&a.micros).then_with(|| a.key.cmp(&b.key)));
    CostReport {
        from,
        to,
        group_by,
        lines: out,
        totals: totals
            .into_iter()
            .map(|(c, t)| line(c.clone(), None, c, micros(t)))
            .collect(),
        series: days
            .into_iter()
            .map(|((day, currency), t)| CostPoint {
                day,
                currency,
                micros: micros(t),
            })
            .collect(),
    }
}

/// The report as CSV: `group,name,currency,amount`, one line per report line.
pub fn csv(r: &CostReport) -> String {
    // Quoted when it must be; a leading = + - @ is defused for spreadsheets.
    let field = |s: &str| {
        let s = if s.starts_with(['=', '+', '-', '@']) {
            format!("'{s}")
        } else {
            s.to_string()
        };
        if s.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s
        }
    };
    let mut out = String::from("group,name,currency,amount\n");
    for l in &r.lines {
        out.push_str(&format!(
            "{},{},{},{}\n",
            field(&l.key),
            field(l.name.as_deref().unwrap_or("")),
            field(&l.currency),
            l.amount
        ));
    }
    out
}
