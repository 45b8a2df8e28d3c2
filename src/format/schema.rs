//! Table schemas: the CLI's `name:type[!]` column specs and Delta's Spark `StructType` JSON
//! (Delta PROTOCOL, "Schema Serialization Format").

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{Error, Result};
use crate::util::quote::quoted;

/// A column's type. Each maps to one Delta primitive type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// 64-bit signed integer; Delta `long`.
    Int,
    /// 64-bit float; Delta `double`.
    Float,
    /// UTF-8 string; Delta `string`.
    Str,
    /// Delta `boolean`.
    Bool,
    /// `YYYY-MM-DD`; Delta `date`.
    Date,
    /// RFC 3339; Delta `timestamp`.
    Timestamp,
}

impl ColumnType {
    /// The CLI spelling (`int`, `float`, `str`, `bool`, `date`, `timestamp`).
    pub fn cli_name(self) -> &'static str {
        match self {
            ColumnType::Int => "int",
            ColumnType::Float => "float",
            ColumnType::Str => "str",
            ColumnType::Bool => "bool",
            ColumnType::Date => "date",
            ColumnType::Timestamp => "timestamp",
        }
    }

    /// The Delta primitive type name.
    pub fn delta_name(self) -> &'static str {
        match self {
            ColumnType::Int => "long",
            ColumnType::Float => "double",
            ColumnType::Str => "string",
            ColumnType::Bool => "boolean",
            ColumnType::Date => "date",
            ColumnType::Timestamp => "timestamp",
        }
    }

    fn from_cli(s: &str) -> Option<Self> {
        Some(match s {
            "int" => ColumnType::Int,
            "float" => ColumnType::Float,
            "str" => ColumnType::Str,
            "bool" => ColumnType::Bool,
            "date" => ColumnType::Date,
            "timestamp" => ColumnType::Timestamp,
            _ => return None,
        })
    }

    /// The tinydelta type of a Delta primitive type (docs/FORMAT.md, "Parquet data files"):
    /// every integer type is `int`, `float` and `double` are `float`, `timestamp_ntz` is
    /// `timestamp`. `None` for types without a mapping (decimal, binary, struct, array, map).
    fn from_delta(s: &str) -> Option<Self> {
        Some(match s {
            "long" | "integer" | "short" | "byte" => ColumnType::Int,
            "double" | "float" => ColumnType::Float,
            "timestamp_ntz" => ColumnType::Timestamp,
            "string" => ColumnType::Str,
            "boolean" => ColumnType::Bool,
            "date" => ColumnType::Date,
            "timestamp" => ColumnType::Timestamp,
            _ => return None,
        })
    }
}

/// One column: name, type, nullability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Column name (a JSON object key in every row).
    pub name: String,
    /// Its type.
    pub ty: ColumnType,
    /// `false` for `name:type!` (NOT NULL).
    pub nullable: bool,
}

/// Column names reserved for the change data feed (Delta CDF's metadata columns), refused at
/// `create` and `alter`, regardless of case.
pub const RESERVED_NAMES: [&str; 3] = ["_change_type", "_commit_version", "_commit_timestamp"];

/// An ordered list of columns; the order is the key order of canonical rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// Columns in schema order.
    pub columns: Vec<Column>,
}

#[derive(Serialize, Deserialize)]
struct StructField {
    name: String,
    #[serde(rename = "type")]
    ty: serde_json::Value,
    nullable: bool,
    #[serde(default)]
    metadata: serde_json::Value,
}

#[derive(Serialize, Deserialize)]
struct StructType {
    #[serde(rename = "type")]
    ty: String,
    fields: Vec<StructField>,
}

impl Schema {
    /// Parse CLI column specs such as `["id:int!", "region:str"]`.
    ///
    /// Errors: [`Error::InvalidArgument`] naming the bad spec, an unknown type, or a duplicate column.
    pub fn parse_cli(specs: &[String]) -> Result<Schema> {
        if specs.is_empty() {
            return Err(Error::InvalidArgument(
                "a table needs at least one column, given as NAME:TYPE (types: int, float, str, bool, date, timestamp; a trailing ! means NOT NULL)".into(),
            ));
        }
        let mut columns: Vec<Column> = Vec::new();
        for spec in specs {
            let (name, ty) = spec
                .split_once(':')
                .ok_or_else(|| Error::InvalidArgument(format!("column spec {} is not NAME:TYPE", quoted(spec))))?;
            let (ty, nullable) = match ty.strip_suffix('!') {
                Some(t) => (t, false),
                None => (ty, true),
            };
            let ty = ColumnType::from_cli(ty).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "column spec {}: unknown type {} (types: int, float, str, bool, date, timestamp)",
                    quoted(spec),
                    quoted(ty)
                ))
            })?;
            if name.is_empty() {
                return Err(Error::InvalidArgument(format!("column spec {} has an empty name", quoted(spec))));
            }
            if let Some(c) = columns.iter().find(|c| c.name.eq_ignore_ascii_case(name)) {
                return Err(Error::InvalidArgument(if c.name == name {
                    format!("column {} is named twice", quoted(name))
                } else {
                    format!(
                        "columns {} and {} differ only in case; Delta column names are case-insensitive",
                        quoted(&c.name),
                        quoted(name)
                    )
                }));
            }
            columns.push(Column {
                name: name.to_string(),
                ty,
                nullable,
            });
        }
        Ok(Schema { columns })
    }

    /// Refuse column names equal regardless of case (Delta column names are case-insensitive,
    /// PROTOCOL "Schema Serialization Format"). Errors: [`Error::InvalidArgument`] naming both.
    /// Also refuses the change feed's reserved names ([`RESERVED_NAMES`]).
    pub fn check_unique_names(&self) -> Result<()> {
        for (i, c) in self.columns.iter().enumerate() {
            if let Some(r) = RESERVED_NAMES.iter().find(|r| r.eq_ignore_ascii_case(&c.name)) {
                return Err(Error::InvalidArgument(format!(
                    "column name {} is reserved for the change feed ({r}); choose another name",
                    quoted(&c.name)
                )));
            }
            if let Some(d) = self.columns[..i]
                .iter()
                .find(|d| d.name.to_lowercase() == c.name.to_lowercase())
            {
                return Err(Error::InvalidArgument(format!(
                    "columns {} and {} have the same name regardless of case; Delta column names are case-insensitive",
                    quoted(&d.name),
                    quoted(&c.name)
                )));
            }
        }
        Ok(())
    }

    /// The Spark `StructType` JSON Delta keeps in `metaData.schemaString`; every field has
    /// `"metadata":{}`.
    pub fn to_schema_string(&self) -> String {
        let st = StructType {
            ty: "struct".into(),
            fields: self
                .columns
                .iter()
                .map(|c| StructField {
                    name: c.name.clone(),
                    ty: json!(c.ty.delta_name()),
                    nullable: c.nullable,
                    metadata: json!({}),
                })
                .collect(),
        };
        // Serialising plain structs of strings and bools cannot fail.
        serde_json::to_string(&st).unwrap_or_default()
    }

    /// Parse `metaData.schemaString`. Errors: a message for [`Error::Corrupt`] when it is not a
    /// struct of primitive types tinydelta knows.
    pub fn from_schema_string(s: &str) -> std::result::Result<Schema, String> {
        let st: StructType = serde_json::from_str(s).map_err(|e| format!("schemaString is not a StructType: {e}"))?;
        if st.ty != "struct" {
            return Err(format!("schemaString has type {}, not struct", quoted(&st.ty)));
        }
        let mut columns = Vec::with_capacity(st.fields.len());
        for f in st.fields {
            let ty =
                f.ty.as_str()
                    .and_then(ColumnType::from_delta)
                    .ok_or_else(|| {
                        format!(
                            "column {} has Delta type {}, which tinydelta does not read (it reads the integer types, float, double, string, boolean, date, timestamp and timestamp_ntz)",
                            quoted(&f.name),
                            crate::util::quote::shortened(&f.ty.to_string())
                        )
                    })?;
            columns.push(Column {
                name: f.name,
                ty,
                nullable: f.nullable,
            });
        }
        Ok(Schema { columns })
    }

    /// `schema.json` of the mount and `describe --json`: `{"columns":[{"name","type","nullable","deltaType"}]}`,
    /// pretty-printed with a final newline.
    pub fn to_pretty_json(&self) -> String {
        let cols: Vec<_> = self
            .columns
            .iter()
            .map(|c| {
                json!({"name": c.name, "type": c.ty.cli_name(), "nullable": c.nullable, "deltaType": c.ty.delta_name()})
            })
            .collect();
        let mut s = serde_json::to_string_pretty(&json!({ "columns": cols })).unwrap_or_default();
        s.push('\n');
        s
    }

    /// `id:int! region:str` — the CLI spelling, as `describe` prints it.
    pub fn to_cli_string(&self) -> String {
        self.columns
            .iter()
            .map(|c| format!("{}:{}{}", c.name, c.ty.cli_name(), if c.nullable { "" } else { "!" }))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_round_trip() {
        let s = Schema::parse_cli(&["id:int!".into(), "name:str".into(), "t:timestamp".into()]).unwrap();
        assert_eq!(s.to_cli_string(), "id:int! name:str t:timestamp");
        let back = Schema::from_schema_string(&s.to_schema_string()).unwrap();
        assert_eq!(back, s);
        assert!(s.to_schema_string().contains(r#""metadata":{}"#));
    }

    #[test]
    fn bad_specs() {
        assert!(Schema::parse_cli(&["id".into()]).is_err());
        assert!(Schema::parse_cli(&["id:integer".into()]).is_err());
        assert!(Schema::parse_cli(&["a:int".into(), "a:str".into()]).is_err());
        assert!(Schema::parse_cli(&[]).is_err());
    }
}
