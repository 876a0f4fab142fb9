//! Macro expansion: every form, nesting, missing services, escaping and syntax errors.

use serde_json::json;
use weft_planner::macros::{named_services, validate};
use weft_planner::{MacroContext, PlanError, PlanNode};

use crate::fixtures::node;

fn layout() -> Vec<PlanNode> {
    // Given out of order on purpose: expansion sorts by nodenum.
    vec![
        node("c", 1002, &["zk", "dn"]),
        node("a", 1000, &["nn", "zk"]),
        node("b", 1001, &["zk", "dn", "my.dotted.svc"]),
    ]
}

fn expand(me: Option<&str>, s: &str) -> Result<String, PlanError> {
    let l = layout();
    let ctx = MacroContext::new(&l, "alice").unwrap();
    ctx.expand_str(me, s)
}

fn ok(me: &str, s: &str) -> String {
    expand(Some(me), s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn problem(s: &str) -> String {
    expand(Some("a"), s).unwrap_err().to_string()
}

#[test]
fn list_forms_are_sorted_by_nodenum() {
    assert_eq!(
        ok("a", "%host.service.zk%"),
        "a.example,b.example,c.example"
    );
    assert_eq!(ok("a", "%ip.service.zk%"), "10.0.0.10,10.0.0.11,10.0.0.12");
    assert_eq!(
        ok("a", "%ip.access_v4.service.dn%"),
        "203.0.113.11,203.0.113.12"
    );
    assert_eq!(ok("a", "%host.service.my.dotted.svc%"), "b.example");
    assert_eq!(ok("a", "%ip.bind_v4.service.my.dotted.svc%"), "10.0.0.11");
    assert_eq!(ok("a", "%ip.service.my.dotted.svc%"), "10.0.0.11");
}

#[test]
fn counts_instances_owner_and_indexing() {
    assert_eq!(ok("a", "%num.service.zk% %num.service.nosuch%"), "3 0");
    assert_eq!(ok("c", "%instance.self.service.zk%"), "3");
    assert_eq!(ok("b", "%instance.self.service.dn%"), "1");
    assert_eq!(ok("a", "%cluster.owner%"), "alice");
    assert_eq!(ok("a", "%host.service.zk[1]%"), "b.example");
    assert_eq!(ok("a", "%ip.access_v4.service.zk[2]%"), "203.0.113.12");
}

#[test]
fn self_forms_including_the_ones_coopr_never_made_work() {
    assert_eq!(
        ok("b", "%host.self% %ip.self% %ip.access_v4.self%"),
        "b.example 10.0.0.11 203.0.113.11"
    );
    assert_eq!(
        ok(
            "b",
            "%host.self.service.dn%|%ip.self.service.dn%|%ip.access_v4.self.service.dn%"
        ),
        "b.example|10.0.0.11|203.0.113.11"
    );
    // The current node lacks nn: null, and alone in its string it is left as written.
    assert_eq!(ok("b", "%host.self.service.nn%"), "%host.self.service.nn%");
    assert_eq!(
        ok("b", "x=%host.self.service.nn% y=%host.self%"),
        "x= y=b.example"
    );
}

#[test]
fn join_and_map_nest() {
    assert_eq!(
        ok("a", "%join(host.service.zk,' ')%"),
        "a.example b.example c.example"
    );
    assert_eq!(
        ok("a", "%map(host.service.dn,'$:50010')%"),
        "b.example:50010,c.example:50010"
    );
    assert_eq!(
        ok("a", "%join(map(ip.service.zk,'$:2181'),';')%"),
        "10.0.0.10:2181;10.0.0.11:2181;10.0.0.12:2181"
    );
    assert_eq!(ok("a", "%map(host.self,'$$HOME=$')%"), "$HOME=a.example");
    assert_eq!(
        ok("a", "%join( map( host.service.dn , \"[$]\" ) , \"+\" )%"),
        "[b.example]+[c.example]"
    );
}

#[test]
fn missing_services_follow_the_null_rule() {
    assert_eq!(ok("a", "%host.service.nosuch%"), "%host.service.nosuch%");
    assert_eq!(
        ok("a", "x=%host.service.nosuch% y=%host.service.nn%"),
        "x= y=a.example"
    );
    assert_eq!(
        ok("a", "%instance.self.service.dn%"),
        "%instance.self.service.dn%"
    );
    assert_eq!(
        problem("%host.service.nosuch[0]%"),
        "macro at byte 0: index 0 is out of range: service nosuch is on 0 nodes"
    );
    assert_eq!(
        problem("ab%host.service.zk[3]%"),
        "macro at byte 2: index 3 is out of range: service zk is on 3 nodes"
    );
}

#[test]
fn escaping_and_lone_percent() {
    assert_eq!(ok("a", "100%% of %num.service.zk%"), "100% of 3");
    assert_eq!(ok("a", "%%host.self%%"), "%host.self%");
    assert_eq!(ok("a", "50% done"), "50% done");
    assert_eq!(ok("a", "no macros"), "no macros");
}

#[test]
fn syntax_errors_name_position_and_problem() {
    assert_eq!(
        problem("x %host.nope%"),
        "macro at byte 2: in %host.nope% at offset 0: unknown macro 'host.nope'"
    );
    assert_eq!(problem("%join(host.service.zk)%"), "macro at byte 0: in %join(host.service.zk)% at offset 20: expected ',' after the join argument");
    assert_eq!(
        problem("%map(host.service.zk,'x)%"),
        "macro at byte 0: in %map(host.service.zk,'x)% at offset 20: unterminated literal"
    );
    assert_eq!(problem("%host.self[0]%"), "macro at byte 0: in %host.self[0]% at offset 10: an index applies only to host.service and ip.service lists");
    assert_eq!(
        problem("%host.service.zk[x]%"),
        "macro at byte 0: in %host.service.zk[x]% at offset 16: expected digits inside [ ]"
    );
    assert_eq!(
        problem("%host.service.%"),
        "macro at byte 0: in %host.service.% at offset 0: 'host.service.' names no service"
    );
    assert_eq!(
        problem("%num.service.zk extra%"),
        "macro at byte 0: in %num.service.zk extra% at offset 15: unexpected 'extra'"
    );
    assert!(validate("%join(map(ip.service.zk,'$:2181'),',')% and %%").is_ok());
    assert!(validate("%ip.%").is_err());
}

#[test]
fn evaluation_errors_and_missing_current_node() {
    let mut l = layout();
    l[0].ipaddresses.clear();
    l[1].hostname.clear();
    let ctx = MacroContext::new(&l, "alice").unwrap();
    assert_eq!(
        ctx.expand_str(Some("a"), "%ip.service.dn%")
            .unwrap_err()
            .to_string(),
        "macro at byte 0: node c has no bind_v4 address yet"
    );
    assert_eq!(
        ctx.expand_str(Some("b"), "%host.service.nn%")
            .unwrap_err()
            .to_string(),
        "macro at byte 0: node a has no hostname yet"
    );
    assert_eq!(
        ctx.expand_str(Some("a"), "%host.self%").unwrap(),
        "%host.self%"
    );
    assert_eq!(
        ctx.expand_str(None, "%ip.self%").unwrap_err().to_string(),
        "macro at byte 0: %ip.self% needs a current node, and there is none"
    );
    assert_eq!(
        ctx.expand_str(Some("zz"), "%ip.self%")
            .unwrap_err()
            .to_string(),
        "macro at byte 0: node zz is not in the layout"
    );
}

#[test]
fn json_values_expand_every_string_and_errors_carry_the_path() {
    let l = layout();
    let ctx = MacroContext::new(&l, "alice").unwrap();
    let v = json!({"hdfs": {"nn": "%host.service.nn%", "dirs": ["/data/%instance.self.service.dn%", 3, true]}, "%host.self%": null});
    let out = ctx.expand_value(Some("c"), &v).unwrap();
    assert_eq!(
        out,
        json!({"hdfs": {"nn": "a.example", "dirs": ["/data/2", 3, true]}, "%host.self%": null})
    );
    let bad = json!({"hdfs": {"dirs": ["ok", "%bogus%"]}});
    assert_eq!(
        ctx.expand_value(Some("c"), &bad).unwrap_err().to_string(),
        "macro at hdfs.dirs[1], byte 0: in %bogus% at offset 0: unknown macro 'bogus'"
    );
}

#[test]
fn links_expand_once_per_node_of_a_listed_service() {
    let l = layout();
    let ctx = MacroContext::new(&l, "alice").unwrap();
    assert_eq!(
        ctx.expand_each("http://%ip.service.zk%:2181/").unwrap(),
        [
            "http://10.0.0.10:2181/",
            "http://10.0.0.11:2181/",
            "http://10.0.0.12:2181/"
        ]
    );
    // The same service named twice is the same node in each URL; another service stays whole.
    assert_eq!(
        ctx.expand_each("http://%host.service.dn%/?ip=%ip.service.dn%&nn=%host.service.nn%")
            .unwrap(),
        [
            "http://b.example/?ip=10.0.0.11&nn=a.example",
            "http://c.example/?ip=10.0.0.12&nn=a.example"
        ]
    );
    // One node, an index, join(...) or no macro: one value, as expand_str gives it.
    for s in [
        "http://%host.service.nn%/",
        "http://%host.service.zk[1]%/",
        "zk://%join(host.service.zk,';')%/",
        "http://example/",
    ] {
        assert_eq!(
            ctx.expand_each(s).unwrap(),
            [ctx.expand_str(None, s).unwrap()],
            "{s}"
        );
    }
}

#[test]
fn named_services_lists_each_service_a_macro_names_once() {
    let s = "%join(map(ip.service.web,'$:8080'),',')% %num.service.kv% %host.self.service.web% \
             %ip.access_v4.self.service.my.dotted.svc% %instance.self.service.kv% %ip.self% \
             %host.self% %cluster.owner% %% 100%";
    assert_eq!(
        named_services(s).unwrap(),
        vec!["web", "kv", "my.dotted.svc"],
        "in order of appearance, without self, owner or escapes"
    );
    assert!(named_services("no macros").unwrap().is_empty());
    assert!(
        named_services("%ip.service.%").is_err(),
        "a macro that does not parse"
    );
}
