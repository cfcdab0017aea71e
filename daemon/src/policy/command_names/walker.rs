//! The walk of brush-parser's AST: every simple command's program name, every redirection
//! that writes a file, recursing into each word's substitutions, function bodies, here-documents
//! and parameter-expansion words, and refusing what `/bin/sh` (dash) would read differently. The
//! words themselves are read by [`super::words`], the refusals spelled by [`super::checks`].

use std::collections::HashSet;
use std::io::BufReader;

use brush_parser::ast::{
    self, AssignmentName, AssignmentValue, Command, CommandPrefixOrSuffixItem as Item,
    CompoundCommand as Compound, IoFileRedirectTarget as Target, IoRedirect,
};
use brush_parser::word::{self, Parameter, ParameterExpr, ParameterTransformOp, WordPiece};
use brush_parser::{Parser, ParserOptions, Token, tokenize_str_with_options};

use super::checks::{
    check_arithmetic, check_assigned, check_delimiter, check_spans, check_tokenized,
};
use super::heredoc::heredoc_expansions;
use super::words::{has_unquoted_expansion, leading_literal, literal_program, writes_file};
use super::{ASSIGNING, CommandParseError, Inspection, Step, bash_only, dynamic, syntax};

/// Walks `line` and removes repeated names, keeping the first occurrence.
pub(super) fn collect(line: &str) -> Result<Inspection, CommandParseError> {
    let mut walker = Walker {
        options: ParserOptions::default(),
        names: Vec::new(),
        writes: Vec::new(),
        spans: Vec::new(),
    };
    walker.source(line)?;
    let mut seen = HashSet::new();
    walker.names.retain(|name| seen.insert(name.clone()));
    Ok(Inspection {
        programs: walker.names,
        file_writes: walker.writes,
    })
}

/// How `/bin/sh` (dash) reads the text being walked, where that differs from
/// brush's bash reading.
///
/// Inside double quotes, an unquoted here-document body, and the words of `${x:-…}`
/// and its siblings within them, dash treats `'` as a plain character; bash (and so
/// brush) still takes it for a quote inside `${…}`. A `$(…)` or backquoted command
/// starts over unquoted in both shells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quoting {
    /// Unquoted text: `'` quotes in both shells.
    Plain,
    /// Double-quoted text (or a here-document body): `'` is plain to dash.
    Double,
}

/// Collects program names while walking the AST of one line and its substitutions.
struct Walker {
    /// Parser options shared by the program parser and the word parser.
    options: ParserOptions,
    /// Names in the order found, duplicates included (removed by the caller).
    names: Vec<String>,
    /// Operators of the redirections that write files, in the order found.
    writes: Vec<String>,
    /// Character span and text of each tokenizer word met in the source being walked.
    spans: Vec<(usize, usize, String)>,
}

impl Walker {
    /// Parses `src` as a complete program (the line itself or a substitution body).
    fn source(&mut self, src: &str) -> Step {
        let mut parser = Parser::new(BufReader::new(src.as_bytes()), &self.options);
        let program = parser.parse_program().map_err(syntax)?;
        let outer = std::mem::take(&mut self.spans);
        program
            .complete_commands
            .iter()
            .try_for_each(|list| self.list(list))?;
        let spans = std::mem::replace(&mut self.spans, outer);
        check_spans(src, spans)
    }

    /// Walks `a; b & c && d || e | f` and newline-separated items.
    fn list(&mut self, list: &ast::CompoundList) -> Step {
        for ast::CompoundListItem(and_or, _separator) in &list.0 {
            for (_operator, pipeline) in and_or.iter() {
                // A bash keyword, but a program (`/usr/bin/time`) under dash.
                if pipeline.timed.is_some() {
                    self.names.push("time".into());
                }
                pipeline.seq.iter().try_for_each(|cmd| self.command(cmd))?;
            }
        }
        Ok(())
    }

    /// Walks one element of a pipeline.
    fn command(&mut self, command: &Command) -> Step {
        let redirects = match command {
            Command::Simple(simple) => return self.simple(simple),
            Command::Compound(compound, redirects) => {
                self.compound(compound)?;
                redirects
            }
            // The body runs whenever the function is called, possibly later on the
            // same line, so it is always inspected.
            Command::Function(def) => {
                self.word(&def.fname)?;
                self.compound(&def.body.0)?;
                &def.body.1
            }
            // dash runs `[[` as a program and splits `[[ a || rm ]]` at `||`.
            Command::ExtendedTest(..) => {
                return Err(bash_only("`[[ … ]]`", "runs `[[` and splits at `&&`/`||`"));
            }
        };
        redirects
            .iter()
            .flat_map(|list| &list.0)
            .try_for_each(|r| self.redirect(r))
    }

    /// Walks compound commands; their conditions and bodies are ordinary lists.
    fn compound(&mut self, compound: &Compound) -> Step {
        match compound {
            Compound::Arithmetic(_) | Compound::ArithmeticForClause(_) => Err(bash_only(
                "`(( … ))`",
                "reads `((1))` as nested subshells running `1`",
            )),
            Compound::BraceGroup(group) => self.list(&group.list),
            Compound::Subshell(subshell) => self.list(&subshell.list),
            Compound::ForClause(clause) => {
                check_assigned(&clause.variable_name)?;
                clause
                    .values
                    .iter()
                    .flatten()
                    .try_for_each(|w| self.word(w))?;
                self.list(&clause.body.list)
            }
            Compound::CaseClause(clause) => {
                self.word(&clause.value)?;
                for item in &clause.cases {
                    item.patterns.iter().try_for_each(|w| self.word(w))?;
                    item.cmd.iter().try_for_each(|list| self.list(list))?;
                }
                Ok(())
            }
            Compound::IfClause(clause) => {
                self.list(&clause.condition)?;
                self.list(&clause.then)?;
                for branch in clause.elses.iter().flatten() {
                    branch.condition.iter().try_for_each(|c| self.list(c))?;
                    self.list(&branch.body)?;
                }
                Ok(())
            }
            Compound::WhileClause(clause) | Compound::UntilClause(clause) => {
                self.list(&clause.0)?;
                self.list(&clause.1.list)
            }
            Compound::Coprocess(_) => Err(bash_only("`coproc`", "runs a program named coproc")),
        }
    }

    /// Records the program of a simple command and inspects all its other parts.
    fn simple(&mut self, simple: &ast::SimpleCommand) -> Step {
        // Prefix items are expanded before the command word, suffix items after.
        for item in simple.prefix.iter().flat_map(|p| &p.0) {
            self.item(item)?;
        }
        let mut program_name = None;
        if let Some(program) = &simple.word_or_name {
            self.word(program)?;
            let name = literal_program(&program.value, &self.options)?;
            program_name = Some(name.clone());
            self.names.push(name);
        }
        let suffix = simple.suffix.iter().flat_map(|s| &s.0);
        suffix.clone().try_for_each(|item| self.item(item))?;
        match program_name {
            Some(program) if ASSIGNING.contains(&program.as_str()) => {
                let arguments = suffix.filter_map(|item| match item {
                    Item::Word(w) => Some((w, false)),
                    Item::AssignmentWord(_, raw) => Some((raw, true)),
                    _ => None,
                });
                self.assigning_builtin(&program, arguments)
            }
            _ => Ok(()),
        }
    }

    /// Checks the variable names an assigning builtin ([`ASSIGNING`]) takes from its
    /// arguments, each given with whether brush parsed it as an assignment word.
    ///
    /// Every argument is taken for a name (`read PATH`), an assignment
    /// (`export "PATH=/x"`) or options (`printf -vPATH`, where every tail of the option
    /// text is tried as a name); over-reading merely refuses an odd line. `env` stops at
    /// its command word, whose arguments are not its own. An unquoted expansion is
    /// refused wherever the shell splits it into more words, since one of them could be
    /// `PATH=/x`: dash and bash split `env A=$X` and `export "A"=$X`, and only spare
    /// assignment words of the declaration builtins (`export A=$X`).
    fn assigning_builtin<'a>(
        &self,
        program: &str,
        arguments: impl Iterator<Item = (&'a ast::Word, bool)>,
    ) -> Step {
        let declaration = matches!(
            program,
            "export" | "readonly" | "declare" | "typeset" | "local"
        );
        let arguments: Vec<(String, bool, bool)> = arguments
            .map(|(w, assignment_word)| {
                let (text, complete) = leading_literal(&w.value, &self.options)?;
                let split = !(declaration && assignment_word)
                    && has_unquoted_expansion(&w.value, &self.options)?;
                Ok((text, complete, split))
            })
            .collect::<Result<_, CommandParseError>>()?;
        // printf assigns only with `-v` first (a first argument that is not literal might
        // expand to it); otherwise its arguments are data.
        let printf_prints =
            |(text, complete, _): &(String, bool, bool)| *complete && !text.starts_with("-v");
        if program == "printf" && arguments.first().is_none_or(printf_prints) {
            return Ok(());
        }
        for (text, complete, split) in arguments {
            if split {
                return Err(dynamic(format!(
                    "an unquoted expansion in an argument of `{program}` may split into more \
                     words, each taken for a variable; quote it"
                )));
            }
            let (name, _value) = text.split_once('=').unwrap_or((&text, ""));
            if !complete && name.len() == text.len() {
                return Err(dynamic(format!(
                    "`{program}` gets an argument whose variable name is not literal"
                )));
            }
            if let Some(options) = name.strip_prefix('-') {
                let short = !options.starts_with('-');
                if program == "env" && (short && options.contains('S') || options.starts_with("-s"))
                {
                    return Err(dynamic(
                        "`env -S` splits a string into assignments and a command",
                    ));
                }
                if matches!(program, "declare" | "typeset" | "local")
                    && short
                    && options.contains('n')
                {
                    return Err(dynamic(format!(
                        "`{program} -n` assigns through another name"
                    )));
                }
                for candidate in text.split('=') {
                    for (at, _) in candidate.char_indices() {
                        check_assigned(&candidate[at..])?;
                    }
                }
                continue;
            }
            // `a[1]=v` sets `a`, `a+=v` appends to it.
            let name = name.split('[').next().unwrap_or_default();
            check_assigned(name.strip_suffix('+').unwrap_or(name))?;
            if program == "env" && !text.contains('=') {
                break; // the command env runs; the rest are its arguments
            }
        }
        Ok(())
    }

    /// Inspects one prefix or suffix item of a simple command.
    fn item(&mut self, item: &Item) -> Step {
        match item {
            Item::IoRedirect(redirect) => self.redirect(redirect),
            Item::Word(w) => self.word(w),
            // The raw word repeats the assignment; the parsed form separates the
            // array subscript (arithmetic) from the values (words).
            Item::AssignmentWord(assignment, _raw) => self.assignment(assignment),
            Item::ProcessSubstitution(_kind, subshell) => self.list(&subshell.list),
        }
    }

    /// Inspects `NAME=value` and `NAME=(a [i]=b)` (a syntax error under dash).
    fn assignment(&mut self, assignment: &ast::Assignment) -> Step {
        let AssignmentName::VariableName(name) = &assignment.name else {
            return Err(bash_only("`a[i]=v`", "runs it as a program named `a[i]=v`"));
        };
        if assignment.append {
            return Err(bash_only("`a+=v`", "runs it as a program named `a+=v`"));
        }
        check_assigned(name)?;
        match &assignment.value {
            AssignmentValue::Scalar(value) => self.word(value),
            AssignmentValue::Array(elements) => {
                for (index, value) in elements {
                    // `a=([i]=v)` evaluates `i` as arithmetic, like `a[i]=v`.
                    index.iter().try_for_each(|i| check_arithmetic(&i.value))?;
                    self.word(value)?;
                }
                Ok(())
            }
        }
    }

    /// Inspects a redirection target, here-string, here-document or `<(…)`.
    fn redirect(&mut self, redirect: &IoRedirect) -> Step {
        if let IoRedirect::File(fd, kind, target) = redirect
            && writes_file(kind, target, &self.options)
        {
            let fd = fd.map(|n| n.to_string()).unwrap_or_default();
            self.writes.push(format!("{fd}{kind}"));
        }
        match redirect {
            IoRedirect::File(_, _, Target::Filename(w) | Target::Duplicate(w))
            | IoRedirect::HereString(_, w) => self.word(w),
            // dash reads `a &>x rm` as `a &` then `>x rm`, running `rm`.
            IoRedirect::OutputAndError(..) => Err(bash_only("`&>`", "reads `&` then `>`")),
            IoRedirect::File(_, _, Target::Fd(_)) => Ok(()),
            IoRedirect::File(_, _, Target::ProcessSubstitution(_, subshell)) => {
                self.list(&subshell.list)
            }
            IoRedirect::HereDocument(_fd, doc) => {
                check_delimiter(&doc.here_end.value)?;
                // bash expands the body unless any part of the delimiter is quoted;
                // checking the delimiter ourselves guards against a wrong flag.
                let quoted = doc.here_end.value.contains(['\'', '"', '\\']);
                if !doc.requires_expansion && quoted {
                    return Ok(());
                }
                self.heredoc(&doc.doc.value)
            }
        }
    }

    /// Inspects the expansions of an unquoted here-document body.
    ///
    /// brush's `word::parse_heredoc` backtracks exponentially on unbalanced input,
    /// which its tokenizer never checks in a body (`$((` eight times takes 14 s,
    /// `${a[` four times 1.6 s). So [`heredoc_expansions`] cuts the body into its
    /// top-level expansions in linear time, and brush's tokenizer must read them
    /// back as exactly those words before they are parsed; otherwise we refuse.
    fn heredoc(&mut self, body: &str) -> Step {
        let expansions = heredoc_expansions(body)?;
        let joined = expansions.join(" ");
        let tokens = tokenize_str_with_options(&joined, &self.options.tokenizer_options())
            .map_err(|e| syntax(format!("here-document: {e}")))?;
        let words = tokens.iter().map(|t| match t {
            Token::Word(w, _) => Some(w.as_str()),
            Token::Operator(..) => None,
        });
        if !words.eq(expansions.iter().map(|e| Some(*e))) {
            return Err(syntax("here-document expansions could not be isolated"));
        }
        // dash reads a body as if it were inside double quotes (see [`Quoting`]).
        expansions.into_iter().try_for_each(|e| {
            let pieces = word::parse(e, &self.options).map_err(syntax)?;
            check_tokenized(e, &pieces)?;
            self.pieces(&pieces, Quoting::Double)
        })
    }

    /// Finds every command substitution inside a word from the tokenizer.
    fn word(&mut self, w: &ast::Word) -> Step {
        if let Some(loc) = &w.loc {
            let span = (loc.start.index, loc.end.index, w.value.clone());
            self.spans.push(span);
        }
        let pieces = word::parse(&w.value, &self.options).map_err(syntax)?;
        check_tokenized(&w.value, &pieces)?;
        self.pieces(&pieces, Quoting::Plain)
    }

    /// Like [`Walker::word`], for word text that brush keeps as a plain string
    /// (parameter-expansion defaults, patterns and replacements), where blanks are
    /// legitimately unquoted. `quoting` is how dash reads that text.
    ///
    /// brush reads a `'` there as a quote even inside double quotes (bash's own
    /// reading), while dash reads it as a plain character: in `"${u:-'}"; rm x; #'}"`
    /// dash ends the expansion at the first `}` and runs `rm`, and in
    /// `"${u:-'$(rm x)'}"` it runs the substitution brush took for quoted text. So a
    /// single-quoted piece in text dash reads as double-quoted is refused.
    fn word_text(&mut self, text: &str, quoting: Quoting) -> Step {
        let pieces = word::parse(text, &self.options).map_err(syntax)?;
        let single_quoted =
            |p: &word::WordPieceWithSource| matches!(p.piece, WordPiece::SingleQuotedText(_));
        if quoting == Quoting::Double && pieces.iter().any(single_quoted) {
            return Err(syntax(
                "a `'` in `${…}` inside double quotes or a here-document is a plain \
                 character to /bin/sh (dash) but a quote to bash, so what runs cannot be \
                 told; drop the `'` or leave the `${…}` outside double quotes",
            ));
        }
        self.pieces(&pieces, quoting)
    }

    /// Walks parsed word pieces, recursing into quotes, expansions and substitutions.
    /// `quoting` is how dash reads the text these pieces came from.
    fn pieces(&mut self, pieces: &[word::WordPieceWithSource], quoting: Quoting) -> Step {
        for piece in pieces {
            match &piece.piece {
                // `$'\' ; rm x⏎'`: dash sees `$`, a quoted `\`, then runs `rm x`.
                WordPiece::AnsiCQuotedText(_) => {
                    return Err(bash_only("`$'…'`", "reads `$` and a single-quoted string"));
                }
                WordPiece::Text(_)
                | WordPiece::SingleQuotedText(_)
                | WordPiece::EscapeSequence(_)
                | WordPiece::TildeExpansion(_) => {}
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, Quoting::Double)?;
                }
                WordPiece::ParameterExpansion(expr) => self.parameter(expr, quoting)?,
                WordPiece::CommandSubstitution(body) => self.source(body)?,
                // bash unescapes `\$`, `\\` and `` \` `` inside backquotes before
                // parsing, brush only `` \` ``: `` `echo \$(rm x)` `` runs `rm`.
                WordPiece::BackquotedCommandSubstitution(body) if body.contains('\\') => {
                    return Err(dynamic("backslash inside backquotes; use $(…) instead"));
                }
                WordPiece::BackquotedCommandSubstitution(body) => self.source(body)?,
                WordPiece::ArithmeticExpression(expr) => check_arithmetic(&expr.value)?,
            }
        }
        Ok(())
    }

    /// Inspects `${…}`: refuses forms that evaluate values as code and walks the
    /// word operands (defaults, patterns, replacements) for substitutions. `quoting`
    /// is how dash reads the text around the `${…}`.
    fn parameter(&mut self, expr: &ParameterExpr, quoting: Quoting) -> Step {
        use ParameterExpr as P;
        // Kept one variant per line; rustfmt would spread each pattern over five.
        #[rustfmt::skip]
        let (parameter, indirect) = match expr {
            P::Parameter { parameter, indirect }
            | P::ParameterLength { parameter, indirect }
            | P::UseDefaultValues { parameter, indirect, .. }
            | P::AssignDefaultValues { parameter, indirect, .. }
            | P::IndicateErrorIfNullOrUnset { parameter, indirect, .. }
            | P::UseAlternativeValue { parameter, indirect, .. }
            | P::RemoveSmallestSuffixPattern { parameter, indirect, .. }
            | P::RemoveLargestSuffixPattern { parameter, indirect, .. }
            | P::RemoveSmallestPrefixPattern { parameter, indirect, .. }
            | P::RemoveLargestPrefixPattern { parameter, indirect, .. }
            | P::Substring { parameter, indirect, .. }
            | P::Transform { parameter, indirect, .. }
            | P::UppercaseFirstChar { parameter, indirect, .. }
            | P::UppercasePattern { parameter, indirect, .. }
            | P::LowercaseFirstChar { parameter, indirect, .. }
            | P::LowercasePattern { parameter, indirect, .. }
            | P::ReplaceSubstring { parameter, indirect, .. } => (parameter, *indirect),
            P::VariableNames { .. } | P::MemberKeys { .. } => return Ok(()),
        };
        if indirect {
            return Err(dynamic("${!…} evaluates a name taken from a value"));
        }
        match (parameter, expr) {
            (Parameter::NamedWithIndex { index, .. }, _) => check_arithmetic(index)?,
            // `${PATH:=…}` assigns when the variable is unset.
            (Parameter::Named(name), P::AssignDefaultValues { .. }) => check_assigned(name)?,
            _ => {}
        }
        #[rustfmt::skip]
        let words: Vec<&String> = match expr {
            P::UseDefaultValues { default_value: v, .. }
            | P::AssignDefaultValues { default_value: v, .. }
            | P::IndicateErrorIfNullOrUnset { error_message: v, .. }
            | P::UseAlternativeValue { alternative_value: v, .. }
            | P::RemoveSmallestSuffixPattern { pattern: v, .. }
            | P::RemoveLargestSuffixPattern { pattern: v, .. }
            | P::RemoveSmallestPrefixPattern { pattern: v, .. }
            | P::RemoveLargestPrefixPattern { pattern: v, .. }
            | P::UppercaseFirstChar { pattern: v, .. }
            | P::UppercasePattern { pattern: v, .. }
            | P::LowercaseFirstChar { pattern: v, .. }
            | P::LowercasePattern { pattern: v, .. } => v.iter().collect(),
            P::ReplaceSubstring { pattern, replacement, .. } => {
                std::iter::once(pattern).chain(replacement).collect()
            }
            P::Substring { offset, length, .. } => {
                check_arithmetic(&offset.value)?;
                length.iter().try_for_each(|l| check_arithmetic(&l.value))?;
                Vec::new()
            }
            P::Transform { op: ParameterTransformOp::PromptExpand, .. } => {
                return Err(dynamic("${…@P} runs substitutions found in the value"));
            }
            _ => Vec::new(),
        };
        // dash reads the patterns of `#`, `##`, `%` and `%%` unquoted wherever the
        // `${…}` is, and every other word (`-`, `=`, `?`, `+`, and bash's `/`, `^`,
        // `,`, which dash rejects only when they are expanded) as the text around it.
        #[rustfmt::skip]
        let quoting = match expr {
            P::RemoveSmallestSuffixPattern { .. }
            | P::RemoveLargestSuffixPattern { .. }
            | P::RemoveSmallestPrefixPattern { .. }
            | P::RemoveLargestPrefixPattern { .. } => Quoting::Plain,
            _ => quoting,
        };
        words
            .into_iter()
            .try_for_each(|w| self.word_text(w, quoting))
    }
}
