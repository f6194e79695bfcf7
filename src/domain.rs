//! Validated identifiers and the values that cross module boundaries.

use std::fmt;

use icu_properties::props::DefaultIgnorableCodePoint;
use icu_properties::{CodePointSetData, CodePointSetDataBorrowed};
use serde::Serialize;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
use uuid::Uuid;

/// Unix milliseconds to a timestamp (clamped into the representable range).
pub fn ms_to_time(ms: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A sale id: 1–64 characters of `[A-Za-z0-9_-]`, or a sale of a group, `<group>.<name>` (one
/// `.` between two non-empty parts of those characters): the sales of one group share a buyer's
/// limit and, on a Redis Cluster, the group's hash slot (`crate::redis::keys`). No braces or `:`,
/// so it can sit inside a hash tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct SaleId(String);

/// A user id: 1–128 printable characters: no control or Unicode format characters (zero-width,
/// bidi controls, ...), no default-ignorable ones (variation selectors, Hangul fillers, the
/// combining grapheme joiner, ...), no leading or trailing whitespace, and in NFC, so that
/// `alice`, `alice\u{200b}`, `alice\u{fe0f}` and `alice ` cannot be four buyers, nor `zoé` composed
/// and decomposed two. A spelling that is not NFC is refused, not rewritten: the id a buyer sends
/// is the id it is known by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct UserId(String);

impl SaleId {
    /// The longest sale id, in characters (all ASCII).
    pub const MAX_LEN: usize = 64;

    /// Validates `raw`, or says what is wrong with it.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let part = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        let valid = raw.len() <= Self::MAX_LEN
            && match raw.split_once('.') {
                None => part(raw),
                Some((group, name)) => part(group) && part(name),
            };
        if valid {
            Ok(Self(raw.to_owned()))
        } else {
            Err(format!(
                "sale_id must be 1-{} characters of A-Z, a-z, 0-9, '_' or '-', or '<group>.<name>' of those",
                Self::MAX_LEN
            ))
        }
    }

    /// The sale's group: the part before its `.`, for a sale of a group.
    pub fn group(&self) -> Option<&str> {
        self.0.split_once('.').map(|(group, _)| group)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A drop: a product whose sizes (or variants) are the sales of one group, `<drop>.<size>`
/// ([`SaleId::group`]): 1–64 characters of `[A-Za-z0-9_-]`, no `.`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct DropId(String);

impl DropId {
    /// Validates `raw`, or says what is wrong with it.
    pub fn parse(raw: &str) -> Result<Self, String> {
        match SaleId::parse(raw) {
            Ok(id) if id.group().is_none() => Ok(Self(raw.to_owned())),
            _ => Err(format!("drop_id must be 1-{} characters of A-Z, a-z, 0-9, '_' or '-'", SaleId::MAX_LEN)),
        }
    }

    /// The sale of the drop's size `size` (`<drop>.<size>`), or what is wrong with the name.
    pub fn size(&self, size: &str) -> Result<SaleId, String> {
        let valid = !size.contains('.') && SaleId::parse(size).is_ok();
        match valid.then(|| SaleId::parse(&format!("{}.{size}", self.0))) {
            Some(Ok(sale)) => Ok(sale),
            _ => Err(format!(
                "size {size:?}: a size is 1+ characters of A-Z, a-z, 0-9, '_' or '-', and \"<drop_id>.<size>\" at \
                 most {} characters",
                SaleId::MAX_LEN
            )),
        }
    }

    /// The size's name of `sale` if it is one of the drop's sales.
    pub fn size_of<'a>(&self, sale: &'a SaleId) -> Option<&'a str> {
        sale.as_str().strip_prefix(self.0.as_str())?.strip_prefix('.')
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The drop's name as a sale id's (the same characters, valid by construction): what the
    /// per-sale rate limits key a drop's line by.
    pub fn as_sale_name(&self) -> SaleId {
        SaleId(self.0.clone())
    }
}

impl fmt::Display for DropId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl UserId {
    /// The longest user id, in characters.
    pub const MAX_CHARS: usize = 128;

    /// Validates `raw` (from a request, a token or the command line), or says what is wrong.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let stored = Self::stored(raw)?;
        // No ASCII character is a format or a default-ignorable one, and ASCII text is always in
        // NFC: the lookups are for the others only.
        if !raw.is_ascii() {
            if raw.chars().any(|c| c.general_category() == GeneralCategory::Format || DEFAULT_IGNORABLE.contains(c)) {
                return Err("user_id must not contain invisible characters: format characters (zero-width, bidi \
                            controls) or default-ignorable ones (variation selectors, Hangul fillers)"
                    .into());
            }
            if !unicode_normalization::is_nfc(raw) {
                return Err("user_id must be in Unicode NFC, composed (\"é\" as U+00E9, not \"e\" and U+0301)".into());
            }
        }
        if raw.starts_with(char::is_whitespace) || raw.ends_with(char::is_whitespace) {
            return Err("user_id must not start or end with whitespace".into());
        }
        Ok(stored)
    }

    /// A user id read back from Redis or Postgres: only the bounds and the control characters
    /// are checked, as they were when older versions accepted it (a buyer stored before the
    /// format rule stays readable, so its order is still copied, shown and reconciled).
    pub fn stored(raw: &str) -> Result<Self, String> {
        let count = raw.chars().count();
        let valid = (1..=Self::MAX_CHARS).contains(&count) && !raw.chars().any(char::is_control);
        if valid {
            Ok(Self(raw.to_owned()))
        } else {
            Err(format!("user_id must be 1-{} printable characters", Self::MAX_CHARS))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties): characters a renderer shows as
/// nothing when it does not support them, such as variation selectors and Hangul fillers.
const DEFAULT_IGNORABLE: CodePointSetDataBorrowed<'static> = CodePointSetData::new::<DefaultIgnorableCodePoint>();

impl fmt::Display for SaleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A confirmed order, as the purchase script appended it to the sale's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// Made by the app (UUID v7) before the purchase; the order's key in Postgres.
    pub order_id: Uuid,
    /// The sale bought in.
    pub sale_id: SaleId,
    /// The buyer.
    pub user_id: UserId,
    /// Redis server time of the purchase, Unix milliseconds.
    pub created_at_ms: i64,
    /// In a sale with a payment window, the reservation's deadline (Redis time, Unix
    /// milliseconds); `None`: the order is final at once.
    pub pay_by_ms: Option<i64>,
    /// Units bought, 1 to [`MAX_PER_BUYER`].
    pub quantity: u32,
}

/// The most units one buyer may be allowed in a sale or a group (`per_buyer`).
pub const MAX_PER_BUYER: u32 = 100;

/// Where an order stands, as Postgres (the authority) holds it. An order of a sale without a
/// payment window is `Confirmed` at once; with one it is `Reserved` until exactly one of `Paid`,
/// `Cancelled` or `Expired` (each a compare-and-set from `Reserved`, an operator's cancel too); a
/// `Paid` order may become `Refunded` (an operator's compare-and-set from `Paid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Standing {
    Confirmed,
    Reserved,
    Paid,
    Cancelled,
    Expired,
    /// A paid order whose refund an operator recorded (its units back only if asked).
    Refunded,
}

impl Standing {
    /// The name Postgres and the API use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Confirmed => "confirmed",
            Self::Reserved => "reserved",
            Self::Paid => "paid",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
            Self::Refunded => "refunded",
        }
    }

    /// Parses a stored status.
    pub fn parse(word: &str) -> Option<Self> {
        [Self::Confirmed, Self::Reserved, Self::Paid, Self::Cancelled, Self::Expired, Self::Refunded]
            .into_iter()
            .find(|s| s.as_str() == word)
    }
}

/// A queued sale's waiting room, as an admin seeds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSpec {
    /// When the pre-queue opens, Unix milliseconds (before the sale's start).
    pub opens_at_ms: i64,
    /// Buyers admitted per second.
    pub rate: u32,
    /// Milliseconds an admitted buyer has to buy.
    pub ttl_ms: i64,
    /// The shuffle seed, drawn at random (`crate::admission::draw_seed`); a sale that has one
    /// keeps it (Redis and Postgres alike).
    pub seed: [u8; 32],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standings_round_trip_through_their_names() {
        use Standing::*;
        for s in [Confirmed, Reserved, Paid, Cancelled, Expired, Refunded] {
            assert_eq!(Standing::parse(s.as_str()), Some(s));
        }
        assert_eq!(Standing::parse("queued"), None);
    }

    #[test]
    fn sale_ids_are_tag_safe() {
        for ok in ["a", "flash-2026_11", &"x".repeat(64), "shoe.42", "a.b"] {
            assert!(SaleId::parse(ok).is_ok(), "{ok:?}");
        }
        for bad in ["", "{a}", "a}b", "a b", "é", "a:b", &"x".repeat(65), ".a", "a.", "a.b.c", "."] {
            assert!(SaleId::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(SaleId::parse("shoe.42").unwrap().group(), Some("shoe"));
        assert_eq!(SaleId::parse("shoe").unwrap().group(), None);
    }

    #[test]
    fn drop_ids_name_their_sizes() {
        let drop = DropId::parse("sneaker").unwrap();
        assert_eq!(drop.size("42").unwrap().as_str(), "sneaker.42");
        assert_eq!(drop.size_of(&SaleId::parse("sneaker.42").unwrap()), Some("42"));
        assert_eq!(drop.size_of(&SaleId::parse("sneakers.42").unwrap()), None);
        for bad in ["", "a.b", "4 2", "{x}", &"x".repeat(60)] {
            assert!(drop.size(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "a.b", "a:b", &"x".repeat(65)] {
            assert!(DropId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn user_ids_are_printable_and_bounded() {
        for ok in ["u", "alice@example.com", "用户-42", "with space", &"é".repeat(128)] {
            assert!(UserId::parse(ok).is_ok(), "{ok:?}");
        }
        for bad in ["", "a\nb", "tab\t", "nul\0", &"x".repeat(129)] {
            assert!(UserId::parse(bad).is_err(), "{bad:?}");
            assert!(UserId::stored(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn look_alike_user_ids_are_refused_at_the_edge_but_readable_when_stored() {
        // Zero-width space, word joiner, BOM, soft hyphen, RTL override, LTR mark: category Cf.
        let look_alikes =
            ["alice\u{200b}", "al\u{2060}ice", "\u{feff}alice", "ali\u{ad}ce", "\u{202e}ecila", "alice\u{200e}"];
        for raw in look_alikes.into_iter().chain([" alice", "alice ", "alice\u{a0}", "\u{3000}alice"]) {
            let refused = UserId::parse(raw).unwrap_err();
            assert!(refused.contains("format characters") || refused.contains("whitespace"), "{raw:?}: {refused}");
            assert_eq!(UserId::stored(raw).unwrap().as_str(), raw, "stored before the rule: still readable");
        }
        assert!(UserId::parse("alice smith").is_ok(), "inner spaces stay allowed");
    }

    /// Issue 39: characters that are invisible without being format characters (a combining
    /// grapheme joiner, a variation selector, a Hangul filler, a supplementary variation
    /// selector: Default_Ignorable_Code_Point) made `alice` a second buyer, and so did `zoé`
    /// spelled decomposed.
    #[test]
    fn invisible_and_non_nfc_user_ids_are_refused_but_readable_when_stored() {
        for raw in
            ["alice\u{34f}", "alice\u{fe0f}", "alice\u{3164}", "alice\u{e0100}", "\u{115f}alice", "al\u{180b}ice"]
        {
            let refused = UserId::parse(raw).unwrap_err();
            assert!(refused.contains("invisible"), "{raw:?}: {refused}");
            assert_eq!(UserId::stored(raw).unwrap().as_str(), raw, "stored before the rule: still readable");
        }
        for nfc in ["zo\u{e9}", "\u{c5}ngstr\u{f6}m", "\u{1e0d}\u{307}", "\u{d55c}"] {
            assert!(UserId::parse(nfc).is_ok(), "{nfc:?}");
        }
        // Decomposed, a singleton (the Angstrom sign), marks out of canonical order, conjoining jamo.
        for raw in ["zoe\u{301}", "\u{212b}ngstr\u{f6}m", "\u{1e0b}\u{323}", "\u{1100}\u{1161}"] {
            let refused = UserId::parse(raw).unwrap_err();
            assert!(refused.contains("NFC"), "{raw:?}: {refused}");
            assert_eq!(UserId::stored(raw).unwrap().as_str(), raw);
        }
    }
}
