//! `raidkit model`, `raidkit model validate`, `raidkit plan`: predictions from the model
//! crate (raidkit_model), printed as tables, charts and JSON.

use raidkit_cli::CliError;
use raidkit_disk::emu::catalog::Catalog;
use raidkit_model::validate::{self, Case, Predicted};

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// A measurements file of the same form as the studies' (default: the studies' own,
    /// built in).
    #[arg(long)]
    pub measurements: Option<std::path::PathBuf>,
    /// A catalog of your own drives and controllers beside the built-in one.
    #[arg(long)]
    pub catalog: Option<std::path::PathBuf>,
    /// Print a JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn catalog(path: Option<&std::path::Path>) -> Result<Catalog, CliError> {
    Catalog::load(path).map_err(|e| CliError::usage(e.to_string()))
}

pub fn validate(args: ValidateArgs) -> Result<(), CliError> {
    let cat = catalog(args.catalog.as_deref())?;
    let text = match &args.measurements {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| CliError::usage(format!("{}: {e}", p.display())))?,
        None => validate::SEED_MEASUREMENTS.to_string(),
    };
    let cases = validate::cases(&text, &cat).map_err(CliError::usage)?;
    let mut rows: Vec<(Case, Predicted)> = Vec::new();
    for c in cases {
        let f = raidkit_model::predict(&c.system, &c.load).map_err(CliError::failure)?;
        let p = Predicted::of(&c, &f);
        rows.push((c, p));
    }
    println!(
        "{:<48} {:>9} {:>9} {:>7}  limit",
        "cell", "measured", "analytic", "error"
    );
    for (c, p) in &rows {
        println!(
            "{:<48} {:>9.1} {:>9.1} {:>+6.0}%  {}",
            c.label,
            c.measured.value(),
            p.mb_s,
            p.error * 100.0,
            p.limit
        );
    }
    let med = validate::median_abs(rows.iter().map(|r| r.1.error));
    println!("median absolute error: {:.1}%", med * 100.0);
    Ok(())
}
