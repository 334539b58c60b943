//! `sluice validate`: the config's pipelines and each sink's guarantee.

use crate::cli::ValidateArgs;
use crate::{Failure, assemble};

pub fn validate(args: ValidateArgs) -> Result<(), Failure> {
    let config = assemble::load(&args.config.config)?;
    let mut rows = vec![[
        "PIPELINE".to_string(),
        "SOURCE".to_string(),
        "SINK".to_string(),
        "TYPE".to_string(),
        "REQUIRED".to_string(),
        "GUARANTEE".to_string(),
    ]];
    for pipeline in &config.pipelines {
        for sink in &pipeline.sinks {
            rows.push([
                pipeline.name.clone(),
                format!("{} ({})", pipeline.source.id(), pipeline.source.type_name()),
                sink.id().to_string(),
                sink.type_name().to_string(),
                if sink.required() { "yes" } else { "no" }.to_string(),
                sink.guarantee().to_string(),
            ]);
        }
    }
    print!("{}", table(&rows));
    for pipeline in &config.pipelines {
        for (index, step) in pipeline.transforms.iter().enumerate() {
            if let Some(why) = step.may_fail() {
                println!(
                    "note: pipeline {:?}: transform {} ({}) can fail on an event: {why}. In the pipeline's list a \
                     failure stops the pipeline; in a sink's own list the event goes to that sink's dead letter \
                     queue and the rest flows on.",
                    pipeline.name,
                    index + 1,
                    step.kind()
                );
            }
        }
    }
    println!("config ok: {} pipeline(s)", config.pipelines.len());
    if args.connect {
        return crate::connect::check(&config);
    }
    Ok(())
}

/// Left-aligned columns separated by two spaces.
pub fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
