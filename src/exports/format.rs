//! One order as a CSV record (RFC 4180) or an NDJSON line.

use std::fmt::Write;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::OrderLine;

/// How an export is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/csv`: a header line, then one record per order; CRLF line ends (RFC 4180).
    Csv,
    /// `application/x-ndjson`: one JSON object per order and line.
    Ndjson,
}

/// The CSV export's first line: the columns, in [`OrderLine`]'s order.
pub const CSV_HEADER: &str =
    "order_id,sale_id,user_id,quantity,status,created_at,persisted_at,pay_by,resolved_at,resolved_by,restocked_at\r\n";

impl Format {
    /// `csv` or `ndjson`.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "csv" => Some(Self::Csv),
            "ndjson" => Some(Self::Ndjson),
            _ => None,
        }
    }

    /// The answer's media type.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Csv => "text/csv; charset=utf-8",
            Self::Ndjson => "application/x-ndjson",
        }
    }

    /// The file name's extension.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Csv => "csv",
            Self::Ndjson => "ndjson",
        }
    }

    /// What comes before the first order.
    pub fn header(self) -> &'static str {
        match self {
            Self::Csv => CSV_HEADER,
            Self::Ndjson => "",
        }
    }

    /// Appends `order`'s line to `out`.
    pub fn write(self, order: &OrderLine, out: &mut String) {
        match self {
            Self::Ndjson => {
                out.push_str(&serde_json::to_string(order).unwrap_or_default());
                out.push('\n');
            }
            Self::Csv => {
                let _ = write!(out, "{},{},", order.order_id, order.sale_id);
                text_field(&order.user_id, out);
                let _ = write!(out, ",{},{},", order.quantity, order.status);
                for at in [Some(order.created_at), Some(order.persisted_at), order.pay_by, order.resolved_at] {
                    instant(at, out);
                    out.push(',');
                }
                text_field(order.resolved_by.as_deref().unwrap_or_default(), out);
                out.push(',');
                instant(order.restocked_at, out);
                out.push_str("\r\n");
            }
        }
    }
}

fn instant(at: Option<OffsetDateTime>, out: &mut String) {
    if let Some(text) = at.and_then(|t| t.to_offset(time::UtcOffset::UTC).format(&Rfc3339).ok()) {
        out.push_str(&text);
    }
}

/// A free-text field (a buyer's id, a payment event's id): quoted when it holds a comma, a quote
/// or a line end (RFC 4180), and prefixed with `'` when a spreadsheet would read it as a formula
/// (it starts with `=`, `+`, `-`, `@`, a tab or a CR: OWASP's CSV injection advice). NDJSON keeps
/// every value as it is.
fn text_field(value: &str, out: &mut String) {
    let formula = value.starts_with(['=', '+', '-', '@', '\t', '\r']);
    let quoted = formula || value.contains([',', '"', '\n', '\r']);
    if quoted {
        out.push('"');
    }
    if formula {
        out.push('\'');
    }
    for c in value.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    if quoted {
        out.push('"');
    }
}
