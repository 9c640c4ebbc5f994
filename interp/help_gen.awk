# help_gen.awk — turns docs/reference.md into interp/help_table.c, the rows
# help() and :help show (interp/help.c), so the reference is the one source.
# Each table row "| names | what | example |" becomes {section, intro, names,
# what, example}; intro is the text between the section's heading and its
# table (it gives a signature shared by the rows: "`name(x)`"). Cells are
# kept as written; interp/help.c splits the names and drops the backticks.
# Usage: awk -f interp/help_gen.awk docs/reference.md > interp/help_table.c

function cstr(s) {
    gsub(/\\/, "\\\\", s)
    gsub(/"/, "\\\"", s)
    return "\"" s "\""
}

function trim(s) {
    sub(/^[ \t]+/, "", s)
    sub(/[ \t]+$/, "", s)
    return s
}

BEGIN {
    print "/* help_table.c — generated from docs/reference.md by interp/help_gen.awk;"
    print " * not in git: edit the reference, not this file. */"
    print "#include \"interp/help.h\""
    print ""
    print "const HelpRow help_rows[] = {"
    section = ""; intro = ""; in_table = 0; n = 0
}

/^## / {
    section = trim(substr($0, 4)); intro = ""; in_table = 0
    next
}

/^\|/ {
    line = $0
    sub(/^\|/, "", line)
    sub(/\|[ \t]*$/, "", line)
    k = split(line, cell, "|")
    # the header row and the |---| rule are not entries
    if (!in_table) { in_table = 1; next }
    if (trim(cell[1]) ~ /^-+$/ || k < 3) next
    names = trim(cell[1]); what = trim(cell[2]); example = trim(cell[3])
    # a cell with '|' inside would split into more: join the tail back
    for (i = 4; i <= k; i++) example = example "|" cell[i]
    printf "    {%s, %s, %s, %s, %s},\n", cstr(section), cstr(intro), cstr(names), cstr(what), cstr(trim(example))
    n++
    next
}

{
    if (in_table) { in_table = 0; intro = "" }
    if (section != "" && trim($0) != "") intro = (intro == "" ? "" : intro " ") trim($0)
}

END {
    print "};"
    print ""
    printf "const int help_nrows = %d;\n", n
}
