use time::macros::datetime;

use super::*;

fn order(user_id: &str, resolved_by: Option<&str>) -> OrderLine {
    OrderLine {
        order_id: uuid::Uuid::nil(),
        sale_id: "drop.40".into(),
        user_id: user_id.into(),
        quantity: 2,
        status: "paid".into(),
        created_at: datetime!(2026-11-28 20:00:00.123 UTC),
        persisted_at: datetime!(2026-11-28 21:00:00 +01:00),
        pay_by: Some(datetime!(2026-11-28 20:10:00 UTC)),
        resolved_at: None,
        resolved_by: resolved_by.map(str::to_owned),
        restocked_at: None,
    }
}

fn csv(order: &OrderLine) -> String {
    let mut out = String::new();
    Format::Csv.write(order, &mut out);
    out
}

#[test]
fn a_csv_record_has_every_column_in_utc_and_quotes_what_it_must() {
    let nil = uuid::Uuid::nil();
    assert_eq!(
        csv(&order("alice", Some("evt_1"))),
        format!(
            "{nil},drop.40,alice,2,paid,2026-11-28T20:00:00.123Z,2026-11-28T20:00:00Z,2026-11-28T20:10:00Z,,evt_1,\r\n"
        )
    );
    assert_eq!(CSV_HEADER.matches(',').count(), csv(&order("a", None)).matches(',').count());
    let quoted = csv(&order("o'brien, \"bob\"\nline", None));
    assert!(quoted.contains(",\"o'brien, \"\"bob\"\"\nline\","), "{quoted}");
    for formula in ["=HYPERLINK(\"x\")", "+1", "-1", "@SUM(A1)"] {
        let record = csv(&order(formula, Some(formula)));
        let escaped = format!("\"'{}\"", formula.replace('"', "\"\""));
        assert_eq!(record.matches(&escaped).count(), 2, "{record}");
    }
}

#[test]
fn an_ndjson_line_is_the_order_as_it_is() {
    let mut out = String::new();
    Format::Ndjson.write(&order("=1+1,\"x\"", None), &mut out);
    assert!(out.ends_with("}\n") && out.matches('\n').count() == 1, "{out}");
    let value: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(value["user_id"], "=1+1,\"x\"");
    assert_eq!(value["quantity"], 2);
    assert_eq!(value["created_at"], "2026-11-28T20:00:00.123Z");
    assert_eq!(value["resolved_at"], serde_json::Value::Null);
    assert_eq!(Format::parse("csv"), Some(Format::Csv));
    assert_eq!(Format::parse("xml"), None);
}
