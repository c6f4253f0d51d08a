import Alert from '@material-ui/lab/Alert';
import AlertTitle from '@material-ui/lab/AlertTitle';
import type { FitResult } from '../api/types';

/** The "will it fit" answer: yes, or which level lacks what. */
export function FitPanel(props: { fit: FitResult }) {
  const { fit } = props;
  // The API omits false booleans: no `fits` means it does not fit.
  if (fit.fits) {
    return (
      <Alert severity="success" data-testid="fit-result">
        Fits: the team, its department and the cluster have room for it now.
      </Alert>
    );
  }
  const shortfalls = fit.shortfalls ?? [];
  return (
    <Alert severity="warning" data-testid="fit-result">
      <AlertTitle>Does not fit right now</AlertTitle>
      {shortfalls.length === 0 && 'The server gave no details.'}
      <ul style={{ margin: 0, paddingLeft: 16 }}>
        {shortfalls.map((s, i) => (
          <li key={i}>
            {s.message ||
              `${s.level} ${s.name ?? ''}: ${s.resource} requested ${s.requested}, free ${s.free}`}
          </li>
        ))}
      </ul>
    </Alert>
  );
}
