#include "integration/cli/table.h"

#include <string.h>

void table_init(cli_table *table, const char *const *header, int32_t columns) {
  table->columns = columns;
  table->rows = 0;
  table_add_row(table, header);
}

void table_add_row(cli_table *table, const char *const *cells) {
  if (table->rows == kTableMaxRows) return;
  for (int32_t c = 0; c < table->columns; ++c) {
    snprintf(table->cells[table->rows][c], kTableCellBytes, "%s", cells[c]);
  }
  ++table->rows;
}

void table_print(const cli_table *table, FILE *out) {
  int widths[kTableMaxColumns] = {0};
  for (int32_t r = 0; r < table->rows; ++r) {
    for (int32_t c = 0; c < table->columns; ++c) {
      int width = (int)strlen(table->cells[r][c]);
      if (width > widths[c]) widths[c] = width;
    }
  }
  for (int32_t r = 0; r < table->rows; ++r) {
    for (int32_t c = 0; c + 1 < table->columns; ++c) {
      fprintf(out, "%-*s  ", widths[c], table->cells[r][c]);
    }
    fprintf(out, "%s\n", table->cells[r][table->columns - 1]);
  }
}
