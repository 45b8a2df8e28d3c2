//! Predicates and SET expressions of row-level changes (docs/CLI.md "Row-level changes"): SQL
//! expressions parsed by `sqlparser` (generic dialect), type-checked against a table's schema
//! before any row is read, evaluated on canonical rows with SQL's three-valued logic, and judged
//! against a data file's statistics for data skipping (Delta PROTOCOL "Per-file Statistics").

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::value::RawValue;
use sqlparser::ast::{
    AccessExpr, BinaryOperator as B, Expr as Ast, FunctionArguments, InTarget, UnaryOperator as U, Value as AstValue,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;

use crate::error::{Error, Result};
use crate::format::rows::{Fields, decimal, decimal_text, timestamp_ntz_us, timestamp_us};
use crate::format::schema::{ColumnType, Schema};

/// Longest expression text accepted, in bytes (docs/CLI.md "Row-level changes").
pub const MAX_EXPR_BYTES: usize = 64 << 10;

/// The most operators (`AND`, `OR`, `NOT`, comparisons, arithmetic) one expression may have:
/// evaluation walks the expression tree recursively, so its depth is bounded (docs/CLI.md
/// "Row-level changes").
pub const MAX_EXPR_OPERATORS: usize = 1000;

/// A value during evaluation. `Null` is SQL's NULL (and "unknown" for conditions).
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// A 64-bit integer.
    Int(i64),
    /// A 64-bit float.
    Float(f64),
    /// A decimal: unscaled value and scale.
    Dec(i128, u8),
    /// A string.
    Str(String),
    /// A date: days since 1970-01-01.
    Date(i32),
    /// A timestamp: µs since the epoch (UTC).
    Ts(i64),
    /// A timestamp without time zone: µs since 1970-01-01T00:00:00 of the local calendar.
    TsNtz(i64),
    /// A nested or binary value as its canonical JSON text (only NULL tests and copies).
    Json(String),
}

/// The static type of an expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Int,
    Float,
    Dec(u8),
    Str,
    Date,
    Ts,
    TsNtz,
    /// binary, json, array, map, struct: only `IS [NOT] NULL`.
    Other,
}

impl Kind {
    fn of(ty: &ColumnType) -> Kind {
        match ty {
            ColumnType::Int => Kind::Int,
            ColumnType::Float => Kind::Float,
            ColumnType::Str => Kind::Str,
            ColumnType::Bool => Kind::Bool,
            ColumnType::Date => Kind::Date,
            ColumnType::Timestamp => Kind::Ts,
            ColumnType::TimestampNtz => Kind::TsNtz,
            ColumnType::Decimal { scale, .. } => Kind::Dec(*scale),
            _ => Kind::Other,
        }
    }

    fn numeric(self) -> bool {
        matches!(self, Kind::Int | Kind::Float | Kind::Dec(_))
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Bool => "bool",
            Kind::Int => "int",
            Kind::Float => "float",
            Kind::Dec(_) => "decimal",
            Kind::Str => "str",
            Kind::Date => "date",
            Kind::Ts => "timestamp",
            Kind::TsNtz => "timestamp_ntz",
            Kind::Other => "nested",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    /// The comparison with its sides swapped (`a < b` is `b > a`).
    fn flip(self) -> Cmp {
        match self {
            Cmp::Lt => Cmp::Gt,
            Cmp::Le => Cmp::Ge,
            Cmp::Gt => Cmp::Lt,
            Cmp::Ge => Cmp::Le,
            c => c,
        }
    }

    /// `NOT (a op b)` for non-null sides.
    fn negate(self) -> Cmp {
        match self {
            Cmp::Eq => Cmp::Ne,
            Cmp::Ne => Cmp::Eq,
            Cmp::Lt => Cmp::Ge,
            Cmp::Le => Cmp::Gt,
            Cmp::Gt => Cmp::Le,
            Cmp::Ge => Cmp::Lt,
        }
    }

    fn holds(self, o: Ordering) -> bool {
        match self {
            Cmp::Eq => o == Ordering::Equal,
            Cmp::Ne => o != Ordering::Equal,
            Cmp::Lt => o == Ordering::Less,
            Cmp::Le => o != Ordering::Greater,
            Cmp::Gt => o == Ordering::Greater,
            Cmp::Ge => o != Ordering::Less,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

/// A column reference: the top-level column and the struct fields below it.
#[derive(Debug, Clone)]
struct ColRef {
    /// As written in messages: `user.age`.
    name: String,
    path: Vec<String>,
    /// The same path in `add.stats`: physical names under column mapping (PROTOCOL "Column
    /// Mapping").
    stats_path: Vec<String>,
    ty: ColumnType,
}

#[derive(Debug, Clone)]
enum Node {
    Col(ColRef),
    Lit(Val),
    Cmp(Cmp, Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    /// `IS NULL` (`false`) / `IS NOT NULL` (`true`).
    IsNull(Box<Node>, bool),
    /// `IS TRUE` / `IS FALSE` (the bool), negated (`IS NOT TRUE`) by the second.
    IsBool(Box<Node>, bool, bool),
    In(Box<Node>, Vec<Node>, bool),
    Like(Box<Node>, Vec<char>, bool),
    Arith(Arith, Box<Node>, Box<Node>, Kind),
    Concat(Box<Node>, Box<Node>),
    Neg(Box<Node>),
}

/// A type-checked expression over one table schema.
#[derive(Debug, Clone)]
pub struct Expr {
    node: Node,
    kind: Kind,
    text: String,
}

/// A type-checked condition (`--where`): a boolean expression.
#[derive(Debug, Clone)]
pub struct Predicate(Expr);

/// A type-checked `col = EXPR` of `--set`.
#[derive(Debug, Clone)]
pub struct Assignment {
    /// The top-level column assigned.
    pub column: String,
    /// Its type.
    pub ty: ColumnType,
    expr: Expr,
}

fn invalid(what: &str, text: &str, why: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{what} {}: {why}", crate::util::quote::quoted(text)))
}

/// Parse `text` as one SQL expression (generic dialect), the whole text.
fn parse(what: &str, text: &str) -> Result<Ast> {
    if text.len() > MAX_EXPR_BYTES {
        return Err(invalid(what, text, format!("is longer than {MAX_EXPR_BYTES} bytes")));
    }
    let dialect = GenericDialect {};
    // A chain of operators (`a OR b OR c ...`) parses without recursion into a tree as deep as
    // it is long, which type checking and evaluation walk recursively: bound its length.
    let tokens = sqlparser::tokenizer::Tokenizer::new(&dialect, text)
        .tokenize()
        .map_err(|e| invalid(what, text, e))?;
    let operators = tokens
        .iter()
        .filter(|t| match t {
            Token::Word(w) => matches!(
                w.keyword,
                sqlparser::keywords::Keyword::AND | sqlparser::keywords::Keyword::OR | sqlparser::keywords::Keyword::NOT
            ),
            Token::Whitespace(_) | Token::Number(..) | Token::SingleQuotedString(_) | Token::Comma => false,
            Token::LParen | Token::RParen | Token::Period => false,
            _ => true,
        })
        .count();
    if operators > MAX_EXPR_OPERATORS {
        return Err(invalid(
            what,
            text,
            format!("has {operators} operators; at most {MAX_EXPR_OPERATORS} are allowed"),
        ));
    }
    let mut p = Parser::new(&dialect)
        .try_with_sql(text)
        .map_err(|e| invalid(what, text, e))?;
    let e = p.parse_expr().map_err(|e| invalid(what, text, e))?;
    let next = p.peek_token();
    if next.token != Token::EOF {
        return Err(invalid(
            what,
            text,
            format!("unexpected {} at column {}", next.token, next.span.start.column),
        ));
    }
    Ok(e)
}

/// The names of a column reference: `a`, `a.b.c`, or a keyword used as a column name (`user`,
/// which the parser reads as a function without arguments). `None` for anything else.
fn path_of(e: &Ast) -> Option<Vec<String>> {
    match e {
        Ast::Identifier(id) => Some(vec![id.value.clone()]),
        Ast::CompoundIdentifier(ids) => Some(ids.iter().map(|i| i.value.clone()).collect()),
        Ast::Function(f) if matches!(f.args, FunctionArguments::None) && f.name.0.len() == 1 => {
            Some(vec![f.name.0[0].as_ident()?.value.clone()])
        }
        Ast::CompoundFieldAccess { root, access_chain } => {
            let mut out = path_of(root)?;
            for a in access_chain {
                match a {
                    AccessExpr::Dot(inner) => out.extend(path_of(inner)?),
                    AccessExpr::Subscript(_) => return None,
                }
            }
            Some(out)
        }
        _ => None,
    }
}

/// Days since 1970-01-01 of `YYYY-MM-DD`.
fn date_days(s: &str) -> Option<i32> {
    let d = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?;
    i32::try_from((d - epoch).num_days()).ok()
}

/// A string literal read as a value of `kind` (a date, timestamp or decimal compared with a
/// column of that type). `None` when it is not one.
fn coerce_str(s: &str, kind: Kind) -> Option<Val> {
    let midnight = |s: &str| date_days(s).map(|d| i64::from(d) * 86_400_000_000);
    match kind {
        Kind::Date => date_days(s).map(Val::Date),
        Kind::Ts => timestamp_us(s).ok().or_else(|| midnight(s)).map(Val::Ts),
        Kind::TsNtz => timestamp_ntz_us(s).or_else(|| midnight(s)).map(Val::TsNtz),
        Kind::Dec(_) | Kind::Int | Kind::Float => number_literal(s.trim()).ok(),
        Kind::Str => Some(Val::Str(s.to_string())),
        _ => None,
    }
}

/// A numeric literal: an integer, an exact decimal (`10.50`), or a float (`1e3`).
fn number_literal(s: &str) -> std::result::Result<Val, String> {
    if s.contains(['e', 'E']) {
        return s.parse::<f64>().map(Val::Float).map_err(|e| e.to_string());
    }
    if !s.contains('.')
        && let Ok(i) = s.parse::<i64>()
    {
        return Ok(Val::Int(i));
    }
    let frac = s.split_once('.').map_or(0, |(_, f)| f.len());
    let scale = u8::try_from(frac).ok().filter(|s| *s <= 38).ok_or("has too many digits")?;
    match decimal(s, 38, scale) {
        Ok((v, _)) => Ok(Val::Dec(v, scale)),
        Err(_) => s.parse::<f64>().map(Val::Float).map_err(|e| e.to_string()),
    }
}

fn kind_of_val(v: &Val) -> Kind {
    match v {
        Val::Null => Kind::Null,
        Val::Bool(_) => Kind::Bool,
        Val::Int(_) => Kind::Int,
        Val::Float(_) => Kind::Float,
        Val::Dec(_, s) => Kind::Dec(*s),
        Val::Str(_) => Kind::Str,
        Val::Date(_) => Kind::Date,
        Val::Ts(_) => Kind::Ts,
        Val::TsNtz(_) => Kind::TsNtz,
        Val::Json(_) => Kind::Other,
    }
}

/// Whether values of kinds `a` and `b` can be compared.
fn comparable(a: Kind, b: Kind) -> bool {
    a == Kind::Null
        || b == Kind::Null
        || (a.numeric() && b.numeric())
        || (a == b && a != Kind::Other)
        || matches!((a, b), (Kind::Dec(_), Kind::Dec(_)))
}

struct Compiler<'s> {
    schema: &'s Schema,
    text: &'s str,
    what: &'s str,
}

impl Compiler<'_> {
    fn err(&self, why: impl std::fmt::Display) -> Error {
        invalid(self.what, self.text, why)
    }

    fn column(&self, parts: &[String]) -> Result<(Node, Kind)> {
        let name = parts.join(".");
        let find = |cols: &[crate::format::schema::Column], want: &str| {
            cols.iter()
                .find(|c| c.name == want)
                .or_else(|| {
                    let mut m = cols.iter().filter(|c| c.name.eq_ignore_ascii_case(want));
                    let one = m.next();
                    one.filter(|_| m.next().is_none())
                })
                .cloned()
        };
        let Some(mut col) = find(&self.schema.columns, &parts[0]) else {
            let names: Vec<&str> = self.schema.columns.iter().map(|c| c.name.as_str()).collect();
            return Err(self.err(format!(
                "no column {} in the table (its columns: {})",
                crate::util::quote::quoted(&parts[0]),
                names.join(", ")
            )));
        };
        let mut path = vec![col.name.clone()];
        let mut stats_path = vec![col.physical_name().to_string()];
        for p in &parts[1..] {
            let ColumnType::Struct(fields) = &col.ty else {
                return Err(self.err(format!(
                    "{} is {}, not a struct: it has no field {}",
                    crate::util::quote::quoted(&path.join(".")),
                    col.ty,
                    crate::util::quote::quoted(p)
                )));
            };
            let Some(f) = find(fields, p) else {
                return Err(self.err(format!(
                    "the struct {} has no field {}",
                    crate::util::quote::quoted(&path.join(".")),
                    crate::util::quote::quoted(p)
                )));
            };
            path.push(f.name.clone());
            stats_path.push(f.physical_name().to_string());
            col = f;
        }
        let kind = Kind::of(&col.ty);
        Ok((Node::Col(ColRef { name, path, stats_path, ty: col.ty }), kind))
    }

    fn literal(&self, v: &AstValue) -> Result<(Node, Kind)> {
        let val = match v {
            AstValue::Number(s, _) => number_literal(s).map_err(|e| self.err(format!("the number {s} {e}")))?,
            AstValue::SingleQuotedString(s) | AstValue::EscapedStringLiteral(s) => Val::Str(s.clone()),
            AstValue::Boolean(b) => Val::Bool(*b),
            AstValue::Null => Val::Null,
            other => return Err(self.err(format!("unsupported literal {other}"))),
        };
        let k = kind_of_val(&val);
        Ok((Node::Lit(val), k))
    }

    /// Compile both sides of a comparison, a string literal taking the other side's type.
    fn pair(&self, a: &Ast, b: &Ast, op: &str) -> Result<(Node, Node)> {
        let (mut na, ka) = self.compile(a)?;
        let (mut nb, kb) = self.compile(b)?;
        let coerce = |n: &mut Node, k: Kind, lit_side: &Ast| -> Result<Kind> {
            if let Node::Lit(Val::Str(s)) = n
                && k != Kind::Str
                && k != Kind::Null
            {
                let Some(v) = coerce_str(s, k) else {
                    return Err(self.err(format!("{lit_side} is not a value of type {}", k.name())));
                };
                *n = Node::Lit(v);
                return Ok(k);
            }
            Ok(Kind::Str)
        };
        if ka == Kind::Other || kb == Kind::Other {
            let side = if ka == Kind::Other { a } else { b };
            return Err(self.err(format!(
                "{side} is a nested or binary value: it can only be tested with IS NULL / IS NOT NULL"
            )));
        }
        let (ka2, kb2) = match (&na, &nb) {
            (_, Node::Lit(Val::Str(_))) if ka != Kind::Str => (ka, coerce(&mut nb, ka, b)?),
            (Node::Lit(Val::Str(_)), _) if kb != Kind::Str => (coerce(&mut na, kb, a)?, kb),
            _ => (ka, kb),
        };
        if !comparable(ka2, kb2) {
            return Err(self.err(format!(
                "cannot {op} {a} ({}) and {b} ({})",
                ka2.name(),
                kb2.name()
            )));
        }
        Ok((na, nb))
    }

    fn condition(&self, e: &Ast) -> Result<Node> {
        let (n, k) = self.compile(e)?;
        if !matches!(k, Kind::Bool | Kind::Null) {
            return Err(self.err(format!("{e} is {}, not a condition", k.name())));
        }
        Ok(n)
    }

    fn compile(&self, e: &Ast) -> Result<(Node, Kind)> {
        Ok(match e {
            Ast::Identifier(_) | Ast::CompoundIdentifier(_) | Ast::CompoundFieldAccess { .. } => match path_of(e) {
                Some(parts) => self.column(&parts)?,
                None => return Err(self.err(format!("unsupported: {e}"))),
            },
            // A keyword that names a column (`user`), parsed as a function without arguments.
            Ast::Function(f) if matches!(f.args, FunctionArguments::None) && path_of(e).is_some() => {
                self.column(&path_of(e).unwrap_or_default())?
            }
            Ast::Value(v) => self.literal(&v.value)?,
            Ast::Nested(inner) => self.compile(inner)?,
            Ast::IsNull(x) | Ast::IsNotNull(x) => {
                let (n, _) = self.compile(x)?;
                (Node::IsNull(Box::new(n), matches!(e, Ast::IsNotNull(_))), Kind::Bool)
            }
            Ast::IsTrue(x) | Ast::IsFalse(x) | Ast::IsNotTrue(x) | Ast::IsNotFalse(x) => {
                let n = self.condition(x)?;
                let t = matches!(e, Ast::IsTrue(_) | Ast::IsNotTrue(_));
                let neg = matches!(e, Ast::IsNotTrue(_) | Ast::IsNotFalse(_));
                (Node::IsBool(Box::new(n), t, neg), Kind::Bool)
            }
            Ast::UnaryOp { op: U::Not, expr } => (Node::Not(Box::new(self.condition(expr)?)), Kind::Bool),
            Ast::UnaryOp { op: U::Minus, expr } => {
                let (n, k) = self.compile(expr)?;
                if !k.numeric() && k != Kind::Null {
                    return Err(self.err(format!("cannot negate {expr} ({})", k.name())));
                }
                match n {
                    Node::Lit(Val::Int(i)) => (Node::Lit(Val::Int(i.wrapping_neg())), k),
                    Node::Lit(Val::Dec(v, s)) => (Node::Lit(Val::Dec(-v, s)), k),
                    Node::Lit(Val::Float(f)) => (Node::Lit(Val::Float(-f)), k),
                    n => (Node::Neg(Box::new(n)), k),
                }
            }
            Ast::UnaryOp { op: U::Plus, expr } => self.compile(expr)?,
            Ast::BinaryOp { left, op, right } => self.binary(left, op, right)?,
            Ast::Between {
                expr,
                negated,
                low,
                high,
            } => {
                let (x1, lo) = self.pair(expr, low, "compare")?;
                let (x2, hi) = self.pair(expr, high, "compare")?;
                let n = Node::And(
                    Box::new(Node::Cmp(Cmp::Ge, Box::new(x1), Box::new(lo))),
                    Box::new(Node::Cmp(Cmp::Le, Box::new(x2), Box::new(hi))),
                );
                (if *negated { Node::Not(Box::new(n)) } else { n }, Kind::Bool)
            }
            Ast::In {
                expr,
                target: InTarget::List(list),
                negated,
                ..
            } => {
                let mut x = None;
                let mut items = Vec::with_capacity(list.len());
                for item in list {
                    let (a, b) = self.pair(expr, item, "compare")?;
                    x.get_or_insert(a);
                    items.push(b);
                }
                let x = match x {
                    Some(x) => x,
                    None => return Err(self.err("IN () needs at least one value")),
                };
                (Node::In(Box::new(x), items, *negated), Kind::Bool)
            }
            Ast::Like {
                negated,
                any: false,
                expr,
                pattern,
                escape_char: None,
            } => {
                let (x, k) = self.compile(expr)?;
                if !matches!(k, Kind::Str | Kind::Null) {
                    return Err(self.err(format!("LIKE takes a string, and {expr} is {}", k.name())));
                }
                let Ast::Value(v) = &**pattern else {
                    return Err(self.err("LIKE takes a string literal pattern"));
                };
                let AstValue::SingleQuotedString(p) = &v.value else {
                    return Err(self.err("LIKE takes a string literal pattern"));
                };
                (Node::Like(Box::new(x), p.chars().collect(), *negated), Kind::Bool)
            }
            other => return Err(self.err(format!("unsupported: {other}"))),
        })
    }

    fn binary(&self, l: &Ast, op: &B, r: &Ast) -> Result<(Node, Kind)> {
        let cmp = match op {
            B::Eq => Some(Cmp::Eq),
            B::NotEq => Some(Cmp::Ne),
            B::Lt => Some(Cmp::Lt),
            B::LtEq => Some(Cmp::Le),
            B::Gt => Some(Cmp::Gt),
            B::GtEq => Some(Cmp::Ge),
            _ => None,
        };
        if let Some(c) = cmp {
            let (a, b) = self.pair(l, r, "compare")?;
            return Ok((Node::Cmp(c, Box::new(a), Box::new(b)), Kind::Bool));
        }
        match op {
            B::And | B::Or => {
                let a = Box::new(self.condition(l)?);
                let b = Box::new(self.condition(r)?);
                Ok((if *op == B::And { Node::And(a, b) } else { Node::Or(a, b) }, Kind::Bool))
            }
            B::StringConcat => {
                let (a, ka) = self.compile(l)?;
                let (b, kb) = self.compile(r)?;
                if ka == Kind::Other || kb == Kind::Other {
                    return Err(self.err(format!("cannot join {l} || {r}: a nested or binary value")));
                }
                Ok((Node::Concat(Box::new(a), Box::new(b)), Kind::Str))
            }
            B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo => {
                let (a, ka) = self.compile(l)?;
                let (b, kb) = self.compile(r)?;
                let ar = match op {
                    B::Plus => Arith::Add,
                    B::Minus => Arith::Sub,
                    B::Multiply => Arith::Mul,
                    B::Divide => Arith::Div,
                    _ => Arith::Mod,
                };
                let bad = |k: Kind| !k.numeric() && k != Kind::Null;
                if bad(ka) || bad(kb) {
                    let hint = if ka == Kind::Str || kb == Kind::Str { " (|| joins strings)" } else { "" };
                    return Err(self.err(format!(
                        "{op} takes numbers, and {l} is {}, {r} is {}{hint}",
                        ka.name(),
                        kb.name()
                    )));
                }
                let kind = match (ka, kb, ar) {
                    (Kind::Float, _, _) | (_, Kind::Float, _) => Kind::Float,
                    (Kind::Int | Kind::Null, Kind::Int | Kind::Null, Arith::Div) => Kind::Float,
                    (Kind::Int | Kind::Null, Kind::Int | Kind::Null, _) => Kind::Int,
                    (_, _, Arith::Mod) => return Err(self.err(format!("{op} takes integers"))),
                    (a, b, _) => {
                        let s = |k: Kind| if let Kind::Dec(s) = k { s } else { 0 };
                        let scale = match ar {
                            Arith::Mul => s(a) + s(b),
                            Arith::Div => s(a) + 6,
                            _ => s(a).max(s(b)),
                        };
                        if scale > 38 {
                            return Err(self.err(format!("{l} {op} {r} needs a scale over 38")));
                        }
                        Kind::Dec(scale)
                    }
                };
                Ok((Node::Arith(ar, Box::new(a), Box::new(b), kind), kind))
            }
            other => Err(self.err(format!("unsupported operator {other}"))),
        }
    }
}

impl Predicate {
    /// Parse and type-check `text` against `schema`. Errors: [`Error::InvalidArgument`] naming
    /// the column or the token (a syntax error, an unknown column, a type mismatch, an
    /// unsupported construct, a condition that is not boolean).
    pub fn parse(schema: &Schema, text: &str) -> Result<Predicate> {
        let what = crate::util::spelling::opt("where");
        let c = Compiler { schema, text, what: &what };
        let ast = parse(&what, text)?;
        let node = c.condition(&ast)?;
        Ok(Predicate(Expr {
            node,
            kind: Kind::Bool,
            text: text.to_string(),
        }))
    }

    /// The predicate as written.
    pub fn text(&self) -> &str {
        &self.0.text
    }

    /// The top-level columns the predicate reads.
    pub fn columns(&self) -> Vec<String> {
        let mut out = Vec::new();
        columns_of(&self.0.node, &mut out);
        out
    }

    /// Whether `row` matches: the condition is true (NULL, unknown, is no match). Errors: the
    /// reason (a value that does not fit its type, an overflow, a division by zero).
    pub fn matches(&self, row: &Row<'_>) -> std::result::Result<bool, String> {
        Ok(matches!(eval(&self.0.node, row)?, Val::Bool(true)))
    }

    /// Whether a data file whose `add.stats` are `stats` may hold a matching row (data
    /// skipping): `false` only when its statistics prove none does; `true` without statistics.
    pub fn may_match(&self, stats: Option<&str>) -> bool {
        let Some(stats) = stats else { return true };
        let st = FileStatsView::parse(stats);
        can_be_true(&self.0.node, &st, false)
    }
}

fn columns_of(n: &Node, out: &mut Vec<String>) {
    match n {
        Node::Col(c) => {
            if !out.contains(&c.path[0]) {
                out.push(c.path[0].clone());
            }
        }
        Node::Lit(_) => {}
        Node::Cmp(_, a, b) | Node::And(a, b) | Node::Or(a, b) | Node::Arith(_, a, b, _) | Node::Concat(a, b) => {
            columns_of(a, out);
            columns_of(b, out);
        }
        Node::Not(a) | Node::IsNull(a, _) | Node::IsBool(a, _, _) | Node::Like(a, _, _) | Node::Neg(a) => columns_of(a, out),
        Node::In(a, l, _) => {
            columns_of(a, out);
            l.iter().for_each(|x| columns_of(x, out));
        }
    }
}

impl Assignment {
    /// Parse and type-check `text`, `COL = EXPR`, against `schema`. Errors:
    /// [`Error::InvalidArgument`] naming the column or the token.
    pub fn parse(schema: &Schema, text: &str) -> Result<Assignment> {
        let what = crate::util::spelling::opt("set");
        let c = Compiler { schema, text, what: &what };
        let ast = parse(&what, text)?;
        let Ast::BinaryOp { left, op: B::Eq, right } = &ast else {
            return Err(c.err("is not COLUMN = EXPRESSION"));
        };
        let Some(name) = path_of(left).filter(|p| p.len() == 1) else {
            return Err(c.err(format!("{left} is not a top-level column (nested fields are set with their struct)")));
        };
        let (Node::Col(col), kind) = c.column(&name)? else {
            return Err(c.err("is not COLUMN = EXPRESSION"));
        };
        let (mut node, mut ek) = c.compile(right)?;
        if let Node::Lit(Val::Str(s)) = &node
            && !matches!(kind, Kind::Str | Kind::Other)
        {
            node = Node::Lit(
                coerce_str(s, kind).ok_or_else(|| c.err(format!("{right} is not a value of type {} for {}", kind.name(), col.name)))?,
            );
            ek = kind;
        }
        let fits = ek == Kind::Null
            || ek == kind
            || (kind.numeric() && ek.numeric())
            || (kind == Kind::Other && ek == Kind::Other && matches!(node, Node::Col(ref r) if r.ty == col.ty));
        if !fits {
            return Err(c.err(format!(
                "column {} is {}, and {right} is {}",
                crate::util::quote::quoted(&col.name),
                col.ty,
                ek.name()
            )));
        }
        Ok(Assignment {
            column: col.name,
            ty: col.ty,
            expr: Expr {
                node,
                kind: ek,
                text: text.to_string(),
            },
        })
    }

    /// The assignment as written.
    pub fn text(&self) -> &str {
        &self.expr.text
    }

    /// The new value's JSON text for `row`, of the column's type (a decimal rounded half up
    /// to the column's scale, as Delta's store assignment does). Errors: the reason (overflow,
    /// division by zero, a float that is not an integer for an int column).
    ///
    /// The error is `(reason, fits)`: `fits` false when the value was computed but the column
    /// cannot hold it (bad data), true when evaluating failed.
    pub fn value_json(&self, row: &Row<'_>) -> std::result::Result<String, (String, bool)> {
        let v = eval(&self.expr.node, row).map_err(|why| (why, true))?;
        let _ = self.expr.kind;
        to_json(&v, &self.ty).map_err(|why| (why, false))
    }
}

/// One canonical row's fields, values as raw JSON (parsed once per row).
pub struct Row<'a> {
    fields: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> Row<'a> {
    /// Parse a row (a JSON object). Errors: the parser's reason.
    pub fn parse(line: &'a str) -> std::result::Result<Row<'a>, String> {
        let f: Fields<'a> = serde_json::from_str(line).map_err(|e| e.to_string())?;
        Ok(Row {
            fields: f.0.into_iter().map(|(k, v)| (k.0, v)).collect(),
        })
    }

    /// The raw JSON of top-level column `name` (`None` when the row lacks it: NULL).
    pub fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    /// The fields in row order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &'a RawValue)> {
        self.fields.iter().map(|(k, v)| (k.as_ref(), *v))
    }
}

/// The raw value at `path` below `raw` (struct fields), `None` for null or missing.
fn descend<'a>(raw: &'a RawValue, path: &[String]) -> std::result::Result<Option<&'a RawValue>, String> {
    let mut cur = raw;
    for p in path {
        if cur.get() == "null" {
            return Ok(None);
        }
        let f: Fields<'a> = serde_json::from_str(cur.get()).map_err(|e| e.to_string())?;
        match f.0.into_iter().find(|(k, _)| k.0 == p.as_str()) {
            Some((_, v)) => cur = v,
            None => return Ok(None),
        }
    }
    Ok(Some(cur))
}

/// A raw JSON value of column type `ty` as a [`Val`].
fn from_json(raw: &str, ty: &ColumnType) -> std::result::Result<Val, String> {
    if raw == "null" {
        return Ok(Val::Null);
    }
    let bad = || format!("{raw} is not a value of type {ty}");
    let string = || serde_json::from_str::<String>(raw).map_err(|_| bad());
    Ok(match ty {
        ColumnType::Int => Val::Int(raw.parse().map_err(|_| bad())?),
        ColumnType::Float => Val::Float(raw.parse().map_err(|_| bad())?),
        ColumnType::Bool => Val::Bool(raw.parse().map_err(|_| bad())?),
        ColumnType::Str => Val::Str(string()?),
        ColumnType::Date => Val::Date(date_days(&string()?).ok_or_else(bad)?),
        ColumnType::Timestamp => Val::Ts(timestamp_us(&string()?).map_err(|_| bad())?),
        ColumnType::TimestampNtz => Val::TsNtz(timestamp_ntz_us(&string()?).ok_or_else(bad)?),
        ColumnType::Decimal { precision, scale } => Val::Dec(decimal(raw, *precision, *scale)?.0, *scale),
        _ => Val::Json(raw.to_string()),
    })
}

fn pow10(n: u8) -> Option<i128> {
    10i128.checked_pow(u32::from(n))
}

/// `v` (scale `from`) at scale `to`, rounded half up (away from zero) when `to` is smaller.
fn rescale(v: i128, from: u8, to: u8) -> Option<i128> {
    if to >= from {
        return v.checked_mul(pow10(to - from)?);
    }
    let d = pow10(from - to)?;
    let (q, r) = (v / d, v % d);
    Some(if r.abs() * 2 >= d { q + v.signum() } else { q })
}

fn as_f64(v: &Val) -> Option<f64> {
    match v {
        Val::Int(i) => Some(*i as f64),
        Val::Float(f) => Some(*f),
        Val::Dec(v, s) => Some(*v as f64 / 10f64.powi(i32::from(*s))),
        _ => None,
    }
}

/// Compare two non-null values of comparable kinds.
fn compare(a: &Val, b: &Val) -> Option<Ordering> {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => Some(x.cmp(y)),
        (Val::Dec(..) | Val::Int(_), Val::Dec(..) | Val::Int(_)) => {
            let d = |v: &Val| match v {
                Val::Dec(v, s) => (*v, *s),
                Val::Int(i) => (i128::from(*i), 0),
                _ => (0, 0),
            };
            let ((x, sx), (y, sy)) = (d(a), d(b));
            let s = sx.max(sy);
            match (rescale(x, sx, s), rescale(y, sy, s)) {
                (Some(x), Some(y)) => Some(x.cmp(&y)),
                _ => as_f64(a)?.partial_cmp(&as_f64(b)?),
            }
        }
        (Val::Float(_), _) | (_, Val::Float(_)) => as_f64(a)?.partial_cmp(&as_f64(b)?),
        (Val::Str(x), Val::Str(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (Val::Bool(x), Val::Bool(y)) => Some(x.cmp(y)),
        (Val::Date(x), Val::Date(y)) => Some(x.cmp(y)),
        (Val::Ts(x), Val::Ts(y)) | (Val::TsNtz(x), Val::TsNtz(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// `LIKE`: `%` any run of characters, `_` one character.
fn like(s: &[char], p: &[char]) -> bool {
    // Iterative with one backtrack point: linear in practice, O(n*m) at worst.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if j < p.len() && (p[j] == '_' || p[j] == s[i]) && p[j] != '%' {
            i += 1;
            j += 1;
        } else if j < p.len() && p[j] == '%' {
            star = Some((j, i));
            j += 1;
        } else if let Some((sj, si)) = star {
            j = sj + 1;
            i = si + 1;
            star = Some((sj, si + 1));
        } else {
            return false;
        }
    }
    p[j..].iter().all(|c| *c == '%')
}

fn text_of(v: &Val) -> Option<String> {
    Some(match v {
        Val::Null => return None,
        Val::Bool(b) => b.to_string(),
        Val::Int(i) => i.to_string(),
        Val::Float(f) => serde_json::to_string(f).ok()?,
        Val::Dec(v, s) => decimal_text(*v, *s),
        Val::Str(s) => s.clone(),
        Val::Date(d) => date_text(*d)?,
        Val::Ts(us) => chrono::DateTime::from_timestamp_micros(*us)?
            .format("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string(),
        Val::TsNtz(us) => chrono::DateTime::from_timestamp_micros(*us)?
            .format("%Y-%m-%dT%H:%M:%S%.6f")
            .to_string(),
        Val::Json(j) => j.clone(),
    })
}

fn date_text(days: i32) -> Option<String> {
    let d = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?.checked_add_signed(chrono::TimeDelta::try_days(i64::from(days))?)?;
    Some(d.format("%Y-%m-%d").to_string())
}

fn arith(op: Arith, a: &Val, b: &Val, kind: Kind) -> std::result::Result<Val, String> {
    if matches!(a, Val::Null) || matches!(b, Val::Null) {
        return Ok(Val::Null);
    }
    let overflow = || "the result overflows".to_string();
    match kind {
        Kind::Int => {
            let (Val::Int(x), Val::Int(y)) = (a, b) else {
                return Err("internal: int arithmetic on other values".into());
            };
            let r = match op {
                Arith::Add => x.checked_add(*y),
                Arith::Sub => x.checked_sub(*y),
                Arith::Mul => x.checked_mul(*y),
                Arith::Mod if *y == 0 => return Err("division by zero".into()),
                Arith::Mod => x.checked_rem(*y),
                Arith::Div => None,
            };
            r.map(Val::Int).ok_or_else(overflow)
        }
        Kind::Float => {
            let (x, y) = (as_f64(a).unwrap_or(f64::NAN), as_f64(b).unwrap_or(f64::NAN));
            if op == Arith::Div && y == 0.0 {
                return Err("division by zero".into());
            }
            Ok(Val::Float(match op {
                Arith::Add => x + y,
                Arith::Sub => x - y,
                Arith::Mul => x * y,
                Arith::Div => x / y,
                Arith::Mod => x % y,
            }))
        }
        Kind::Dec(scale) => {
            let d = |v: &Val| match v {
                Val::Dec(v, s) => (*v, *s),
                Val::Int(i) => (i128::from(*i), 0),
                _ => (0, 0),
            };
            let ((x, sx), (y, sy)) = (d(a), d(b));
            let r = match op {
                Arith::Add | Arith::Sub => {
                    let (x, y) = (rescale(x, sx, scale).ok_or_else(overflow)?, rescale(y, sy, scale).ok_or_else(overflow)?);
                    if op == Arith::Add { x.checked_add(y) } else { x.checked_sub(y) }
                }
                Arith::Mul => x.checked_mul(y),
                Arith::Div => {
                    if y == 0 {
                        return Err("division by zero".into());
                    }
                    // x / y at scale `scale`: x * 10^(scale - sx + sy) / y, rounded half up.
                    let num = rescale(x, sx, scale.checked_add(sy).ok_or_else(overflow)?).ok_or_else(overflow)?;
                    let (q, r) = (num / y, num % y);
                    Some(if r.abs().checked_mul(2).is_none_or(|r2| r2 >= y.abs()) {
                        q + num.signum() * y.signum()
                    } else {
                        q
                    })
                }
                Arith::Mod => None,
            };
            r.map(|v| Val::Dec(v, scale)).ok_or_else(overflow)
        }
        _ => Err("internal: arithmetic on non-numbers".into()),
    }
}

fn eval(n: &Node, row: &Row<'_>) -> std::result::Result<Val, String> {
    Ok(match n {
        Node::Col(c) => match row.get(&c.path[0]) {
            None => Val::Null,
            Some(raw) => match descend(raw, &c.path[1..])? {
                None => Val::Null,
                Some(v) => from_json(v.get(), &c.ty).map_err(|why| format!("{}: {why}", c.name))?,
            },
        },
        Node::Lit(v) => v.clone(),
        Node::Cmp(op, a, b) => {
            let (a, b) = (eval(a, row)?, eval(b, row)?);
            if a == Val::Null || b == Val::Null {
                return Ok(Val::Null);
            }
            match compare(&a, &b) {
                Some(o) => Val::Bool(op.holds(o)),
                None => Val::Null,
            }
        }
        Node::And(a, b) => match eval(a, row)? {
            Val::Bool(false) => Val::Bool(false),
            x => match (x, eval(b, row)?) {
                (_, Val::Bool(false)) => Val::Bool(false),
                (Val::Bool(true), Val::Bool(true)) => Val::Bool(true),
                _ => Val::Null,
            },
        },
        Node::Or(a, b) => match eval(a, row)? {
            Val::Bool(true) => Val::Bool(true),
            x => match (x, eval(b, row)?) {
                (_, Val::Bool(true)) => Val::Bool(true),
                (Val::Bool(false), Val::Bool(false)) => Val::Bool(false),
                _ => Val::Null,
            },
        },
        Node::Not(a) => match eval(a, row)? {
            Val::Bool(b) => Val::Bool(!b),
            _ => Val::Null,
        },
        Node::IsNull(a, not) => Val::Bool((eval(a, row)? == Val::Null) != *not),
        Node::IsBool(a, t, neg) => Val::Bool((eval(a, row)? == Val::Bool(*t)) != *neg),
        Node::In(x, list, negated) => {
            let x = eval(x, row)?;
            if x == Val::Null {
                return Ok(Val::Null);
            }
            let mut unknown = false;
            for item in list {
                let v = eval(item, row)?;
                match compare(&x, &v) {
                    Some(Ordering::Equal) => return Ok(Val::Bool(!negated)),
                    Some(_) => {}
                    None => unknown = true,
                }
            }
            if unknown { Val::Null } else { Val::Bool(*negated) }
        }
        Node::Like(x, p, negated) => match eval(x, row)? {
            Val::Str(s) => Val::Bool(like(&s.chars().collect::<Vec<_>>(), p) != *negated),
            _ => Val::Null,
        },
        Node::Arith(op, a, b, k) => arith(*op, &eval(a, row)?, &eval(b, row)?, *k)?,
        Node::Concat(a, b) => match (text_of(&eval(a, row)?), text_of(&eval(b, row)?)) {
            (Some(x), Some(y)) => Val::Str(x + &y),
            _ => Val::Null,
        },
        Node::Neg(a) => match eval(a, row)? {
            Val::Int(i) => Val::Int(i.checked_neg().ok_or("the result overflows")?),
            Val::Float(f) => Val::Float(-f),
            Val::Dec(v, s) => Val::Dec(-v, s),
            _ => Val::Null,
        },
    })
}

/// `v` as the JSON text of a value of column type `ty` (before the row is validated again).
fn to_json(v: &Val, ty: &ColumnType) -> std::result::Result<String, String> {
    let quote = |s: String| serde_json::to_string(&s).map_err(|e| e.to_string());
    Ok(match (v, ty) {
        (Val::Null, _) => "null".into(),
        (Val::Json(j), _) => j.clone(),
        (_, ColumnType::Int) => match v {
            Val::Int(i) => i.to_string(),
            Val::Dec(x, s) if x % pow10(*s).unwrap_or(1) == 0 => (x / pow10(*s).unwrap_or(1)).to_string(),
            Val::Float(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => (*f as i64).to_string(),
            other => return Err(format!("{} is not an integer", text_of(other).unwrap_or_default())),
        },
        (_, ColumnType::Float) => {
            let f = as_f64(v).ok_or("not a number")?;
            if !f.is_finite() {
                return Err(format!("{f} is not a finite number"));
            }
            serde_json::to_string(&f).map_err(|e| e.to_string())?
        }
        (_, ColumnType::Decimal { scale, .. }) => {
            let (x, s) = match v {
                Val::Dec(x, s) => (*x, *s),
                Val::Int(i) => (i128::from(*i), 0),
                Val::Float(f) => match number_literal(&serde_json::to_string(f).map_err(|e| e.to_string())?) {
                    Ok(Val::Dec(x, s)) => (x, s),
                    Ok(Val::Int(i)) => (i128::from(i), 0),
                    _ => return Err(format!("{f} is not a decimal number")),
                },
                _ => return Err("not a number".into()),
            };
            decimal_text(rescale(x, s, *scale).ok_or("the value overflows")?, *scale)
        }
        (Val::Bool(b), _) => b.to_string(),
        (other, _) => quote(text_of(other).ok_or("no text")?)?,
    })
}

/// A data file's `add.stats`, read leniently (another writer's statistics may be anything: a
/// value that cannot be read is unknown, never a reason to skip).
struct FileStatsView<'a> {
    num_records: Option<u64>,
    min: Option<&'a RawValue>,
    max: Option<&'a RawValue>,
    nulls: Option<&'a RawValue>,
}

impl<'a> FileStatsView<'a> {
    fn parse(stats: &'a str) -> FileStatsView<'a> {
        let f: Option<Fields<'a>> = serde_json::from_str(stats).ok();
        let get = |k: &str| f.as_ref().and_then(|f| f.0.iter().find(|(n, _)| n.0 == k).map(|(_, v)| *v));
        FileStatsView {
            num_records: get("numRecords").and_then(|v| v.get().parse().ok()),
            min: get("minValues"),
            max: get("maxValues"),
            nulls: get("nullCount"),
        }
    }

    fn at(map: Option<&'a RawValue>, c: &ColRef) -> Option<&'a RawValue> {
        descend(map?, &c.stats_path).ok().flatten()
    }

    fn bound(map: Option<&'a RawValue>, c: &ColRef) -> Option<Val> {
        from_json(Self::at(map, c)?.get(), &c.ty).ok()
    }

    fn null_count(&self, c: &ColRef) -> Option<u64> {
        Self::at(self.nulls, c)?.get().parse().ok()
    }

    /// Whether every row of the file is NULL in `c`.
    fn all_null(&self, c: &ColRef) -> bool {
        matches!((self.null_count(c), self.num_records), (Some(n), Some(r)) if n >= r)
    }
}

/// Whether `lit op col` can be true for some row of a file with these statistics.
fn range_may(st: &FileStatsView<'_>, c: &ColRef, op: Cmp, lit: &Val) -> bool {
    if *lit == Val::Null || st.all_null(c) {
        return false;
    }
    if matches!(c.ty, ColumnType::Bool) || Kind::of(&c.ty) == Kind::Other {
        return true;
    }
    let min = FileStatsView::bound(st.min, c);
    let mut max = FileStatsView::bound(st.max, c);
    // Another writer's timestamp statistics may be cut to milliseconds (Spark's): the maximum
    // is widened by the rest of its millisecond.
    if let Some(Val::Ts(us)) = &mut max {
        *us = us.saturating_add(999);
    }
    // col op lit
    let ge = |b: &Option<Val>, want: &[Ordering]| match b.as_ref().and_then(|b| compare(b, lit)) {
        Some(o) => want.contains(&o),
        None => true,
    };
    match op {
        Cmp::Eq => ge(&min, &[Ordering::Less, Ordering::Equal]) && ge(&max, &[Ordering::Greater, Ordering::Equal]),
        Cmp::Ne => !(matches!(min.as_ref().and_then(|m| compare(m, lit)), Some(Ordering::Equal))
            && matches!(max.as_ref().and_then(|m| compare(m, lit)), Some(Ordering::Equal))
            && !matches!(c.ty, ColumnType::Str)),
        Cmp::Lt => ge(&min, &[Ordering::Less]),
        Cmp::Le => ge(&min, &[Ordering::Less, Ordering::Equal]),
        Cmp::Gt => ge(&max, &[Ordering::Greater]),
        Cmp::Ge => ge(&max, &[Ordering::Greater, Ordering::Equal]),
    }
}

/// Whether `n` (negated when `neg`) can be true for some row of a file with these statistics:
/// `false` only when the statistics prove it cannot.
fn can_be_true(n: &Node, st: &FileStatsView<'_>, neg: bool) -> bool {
    match n {
        Node::And(a, b) if !neg => can_be_true(a, st, false) && can_be_true(b, st, false),
        Node::And(a, b) => can_be_true(a, st, true) || can_be_true(b, st, true),
        Node::Or(a, b) if !neg => can_be_true(a, st, false) || can_be_true(b, st, false),
        Node::Or(a, b) => can_be_true(a, st, true) && can_be_true(b, st, true),
        Node::Not(a) => can_be_true(a, st, !neg),
        Node::Lit(Val::Null) => false,
        Node::Lit(Val::Bool(b)) => *b != neg,
        Node::Cmp(op, a, b) => {
            let op = if neg { op.negate() } else { *op };
            match (&**a, &**b) {
                (Node::Col(c), Node::Lit(l)) => range_may(st, c, op, l),
                (Node::Lit(l), Node::Col(c)) => range_may(st, c, op.flip(), l),
                _ => true,
            }
        }
        Node::In(x, list, negated) if *negated == neg => match &**x {
            Node::Col(c) => list.iter().any(|item| match item {
                Node::Lit(l) => range_may(st, c, Cmp::Eq, l),
                _ => true,
            }),
            _ => true,
        },
        Node::IsNull(x, not) => match &**x {
            Node::Col(c) => match (st.null_count(c), st.num_records) {
                // IS NULL: some null; IS NOT NULL: some non-null.
                (Some(nulls), _) if *not == neg => nulls > 0,
                (Some(nulls), Some(rows)) => nulls < rows,
                _ => true,
            },
            _ => true,
        },
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::parse_cli(&[
            "id:int!".into(),
            "name:str".into(),
            "amount:decimal(10,2)".into(),
            "x:float".into(),
            "d:date".into(),
            "t:timestamp".into(),
            "ok:bool".into(),
            "user:struct<age:int,city:str>".into(),
            "tags:array<str>".into(),
        ])
        .unwrap()
    }

    fn m(pred: &str, row: &str) -> bool {
        let p = Predicate::parse(&schema(), pred).unwrap_or_else(|e| panic!("{pred}: {e}"));
        p.matches(&Row::parse(row).unwrap()).unwrap()
    }

    fn err(pred: &str) -> String {
        match Predicate::parse(&schema(), pred) {
            Err(Error::InvalidArgument(s)) => s,
            other => panic!("{pred}: expected an error, got {other:?}"),
        }
    }

    const ROW: &str = r#"{"id":3,"name":"Ada","amount":10.50,"x":1.5,"d":"2024-02-29","t":"2024-01-01T10:00:00+01:00","ok":true,"user":{"age":36,"city":null},"tags":["a"]}"#;

    #[test]
    fn comparisons_and_logic() {
        assert!(m("id = 3", ROW));
        assert!(m("id <> 4 AND id != 5", ROW));
        assert!(m("(id < 4 OR id > 10) AND NOT id >= 4", ROW));
        assert!(m("id IN (1, 2, 3)", ROW) && !m("id NOT IN (1, 2, 3)", ROW));
        assert!(m("id BETWEEN 3 AND 4", ROW) && !m("id NOT BETWEEN 3 AND 4", ROW));
        assert!(m("amount = 10.5", ROW) && m("amount > 10", ROW) && m("amount < 10.51", ROW));
        assert!(m("x = 1.5 AND x < 2", ROW));
        assert!(m("name = 'Ada' AND name LIKE 'A%' AND name LIKE '_da' AND name NOT LIKE 'b%'", ROW));
        assert!(m("d >= '2024-01-01' AND d < '2024-03-01'", ROW));
        assert!(m("t = '2024-01-01T09:00:00Z' AND t > '2024-01-01'", ROW));
        assert!(m("ok AND ok = true AND ok IS TRUE", ROW));
        assert!(m("user.age = 36 AND user.city IS NULL AND tags IS NOT NULL", ROW));
        assert!(m("id + 1 = 4 AND id * 2 = 6 AND id / 2 = 1.5 AND id % 2 = 1", ROW));
        assert!(m("name || '!' = 'Ada!'", ROW));
    }

    #[test]
    fn three_valued_logic() {
        let row = r#"{"id":1,"name":null}"#;
        assert!(!m("name = 'a'", row) && !m("NOT name = 'a'", row) && !m("name <> 'a'", row));
        assert!(m("name IS NULL", row) && m("name IS NULL OR name = 'a'", row));
        assert!(!m("name = 'a' OR id = 2", row) && m("name = 'a' OR id = 1", row));
        assert!(!m("id NOT IN (2, NULL)", row) && m("id IN (1, NULL)", row));
        assert!(!m("NOT (name = 'a' AND id = 1)", row) && m("NOT (name = 'a' AND id = 2)", row));
        assert!(m("(name = 'a') IS NOT TRUE", row));
    }

    #[test]
    fn errors_name_the_column_or_token() {
        assert!(err("idd = 3").contains("no column \"idd\""), "{}", err("idd = 3"));
        assert!(err("name = 3").contains("cannot compare"));
        assert!(err("d = 'yesterday'").contains("'yesterday' is not a value of type date"));
        assert!(err("tags = 'a'").contains("IS NULL"));
        assert!(err("user.zip = 1").contains("no field \"zip\""));
        assert!(err("id = 3 extra").contains("unexpected"));
        assert!(err("id +").contains("--where"));
        assert!(err("id + 1").contains("not a condition"));
        assert!(err("upper(name) = 'A'").contains("unsupported"));
        assert!(err("name + 1 = 2").contains("|| joins strings"));
    }

    #[test]
    fn assignments() {
        let s = schema();
        let row = Row::parse(ROW).unwrap();
        let a = |t: &str| Assignment::parse(&s, t).unwrap_or_else(|e| panic!("{t}: {e}")).value_json(&row).unwrap();
        assert_eq!(a("id = id + 1"), "4");
        assert_eq!(a("amount = amount * 1.1"), "11.55");
        assert_eq!(a("amount = amount / 3"), "3.50");
        assert_eq!(a("amount = 7"), "7.00");
        assert_eq!(a("name = name || ' L.'"), "\"Ada L.\"");
        assert_eq!(a("d = '2025-01-02'"), "\"2025-01-02\"");
        assert_eq!(a("x = id / 2"), "1.5");
        assert_eq!(a("name = NULL"), "null");
        assert_eq!(a("user = user"), r#"{"age":36,"city":null}"#);
        for bad in ["id = 'x'", "d = 3", "nope = 1", "id + 1", "user.age = 3", "id = name"] {
            assert!(Assignment::parse(&s, bad).is_err(), "{bad}");
        }
        let div = Assignment::parse(&s, "id = id / 0").unwrap();
        assert!(div.value_json(&row).unwrap_err().1, "division by zero fails evaluating");
        let f = Assignment::parse(&s, "id = x").unwrap();
        let (why, evaluating) = f.value_json(&row).unwrap_err();
        assert!(!evaluating && why.contains("is not an integer"), "{why}");
    }

    #[test]
    fn data_skipping() {
        let stats = r#"{"numRecords":3,"minValues":{"id":10,"name":"b","amount":1.00,"t":"2024-01-01T00:00:00.000000Z","user":{"age":20}},"maxValues":{"id":20,"name":"d","amount":9.99,"t":"2024-01-02T00:00:00.000000Z","user":{"age":30}},"nullCount":{"id":0,"name":1,"amount":0,"x":3,"user":{"age":0,"city":3}}}"#;
        let may = |p: &str| Predicate::parse(&schema(), p).unwrap().may_match(Some(stats));
        assert!(may("id = 10") && may("id = 20") && !may("id = 21") && !may("id = 9"));
        assert!(!may("id > 20") && may("id >= 20") && !may("id < 10") && may("id <= 10"));
        assert!(!may("10 > id") && may("15 > id"));
        assert!(!may("id IN (1, 2, 30)") && may("id IN (1, 15)"));
        assert!(!may("NOT id <= 20") && may("NOT id < 20"));
        assert!(!may("id = 1 AND name = 'c'") && may("id = 1 OR name = 'c'"));
        assert!(!may("x = 1.0") && may("x IS NULL") && !may("x IS NOT NULL") && !may("id IS NULL"));
        assert!(!may("amount > 9.99") && may("amount > 9.98"));
        assert!(!may("t > '2024-01-02T00:00:01Z'") && may("t > '2024-01-01T23:00:00Z'"));
        assert!(!may("user.age > 30") && !may("user.city = 'x'"));
        assert!(may("id + 0 = 100"), "expressions are not judged");
        assert!(may("ok") && may("name LIKE 'z%'"));
        assert!(Predicate::parse(&schema(), "id = 100").unwrap().may_match(None));
        assert!(Predicate::parse(&schema(), "id = 100").unwrap().may_match(Some("{not json")));
    }

    #[test]
    fn like_patterns() {
        let c = |s: &str| s.chars().collect::<Vec<_>>();
        assert!(like(&c("abc"), &c("a%")) && like(&c("abc"), &c("%c")) && like(&c("abc"), &c("%b%")));
        assert!(like(&c(""), &c("%")) && !like(&c("abc"), &c("a_")) && like(&c("aXbXc"), &c("a%b%c")));
    }
}
