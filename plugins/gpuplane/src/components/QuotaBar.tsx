import Box from '@material-ui/core/Box';
import LinearProgress from '@material-ui/core/LinearProgress';
import Typography from '@material-ui/core/Typography';

/**
 * used of total as a bar with its numbers; over 100% (over-quota use KAI
 * allows from spare capacity) shows full and says so.
 */
export function QuotaBar(props: {
  label: string;
  used: number;
  total: number;
  format: (n: number) => string;
  usedLabel?: string;
}) {
  const { label, used, total, format, usedLabel = 'allocated' } = props;
  let pct = used > 0 ? 100 : 0;
  if (total > 0) pct = (used / total) * 100;
  return (
    <Box minWidth={160} mb={0.5} data-testid={`quota-bar-${label.toLowerCase()}`}>
      <Typography variant="caption" display="block">
        {label}: {format(used)} {usedLabel} of {format(total)}
        {pct > 100 ? ' (over quota)' : ''}
      </Typography>
      <LinearProgress
        variant="determinate"
        value={Math.min(100, pct)}
        color={pct > 100 ? 'secondary' : 'primary'}
        aria-label={`${label} ${usedLabel}`}
      />
    </Box>
  );
}
